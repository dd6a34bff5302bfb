/*
 * common/outfile.h - the one way verdict creates an output file.
 *
 * Every writer of a file (plans, reports, stage dumps, value dumps) goes
 * through here, so that an output path is judged the same way everywhere:
 *
 *   - a path that exists and is not a regular file (a FIFO, a device such as
 *     /dev/null or /dev/full, a directory, a socket) is refused: verdict never
 *     replaces such a thing with a regular file, and never writes into it;
 *   - a symbolic link is refused too, whatever it points to: verdict neither
 *     replaces the link nor writes through it (give the file it points to);
 *   - a path whose directory does not exist is refused (nothing is created
 *     on the way);
 *   - an existing regular file that the user cannot write is refused;
 *   - "-" means standard output where the caller allows it (VD_OUTFILE_STDOUT),
 *     and is refused elsewhere (./- names a file called "-").
 *
 * A refusal is VD_EIO with one line naming the path (exit 2 in verifier/).
 *
 * Writing goes to a temporary file created exclusively (O_CREAT | O_EXCL |
 * O_NOFOLLOW, a random name, mode 0600) in the target's directory; commit
 * gives it the mode (and, when permitted, the owner) of the file it replaces,
 * or 0666 minus the umask for a new file, and renames it over the target.
 * A reader of the target sees the old content or the new, never a part.
 * Abort (or a failed commit) unlinks the temporary.  No fsync: a crash of the
 * machine right after a run may lose the new file, never leave a torn one
 * under the target's name on the usual file systems.
 *
 * Not done: hard links to the target keep the old content (the rename gives
 * the name a new inode), as with any editor that saves by renaming.
 *
 * Layer: common/ (includes only common/).
 */
#ifndef VD_OUTFILE_H
#define VD_OUTFILE_H

#include <stdio.h>
#include <sys/types.h>

#include "diag.h"

/* "-" is standard output (only --json today). */
#define VD_OUTFILE_STDOUT 1u

typedef struct {
  FILE *fp;     /* write here: the temporary, or stdout */
  char *path;   /* the target (own copy); NULL once released */
  char *tmp;    /* the temporary's path; NULL for stdout */
  int replace;  /* the target existed: give the temporary its mode and owner */
  mode_t mode;
  uid_t uid;
  gid_t gid;
} vd_outfile;

/* Whether `path` may be written under the rules above, without creating
 * anything.  For early checks (an output refused before a long run).
 * VD_OK, VD_EIO (diag names the path and why). */
vd_rc vd_outfile_check(const char *path, unsigned flags, vd_diag *d);

/* Checks `path` and opens a temporary beside it (or stdout for "-" with
 * VD_OUTFILE_STDOUT).  o is caller storage; on failure it is left released
 * (vd_outfile_abort is then a no-op).  VD_OK, VD_EIO, VD_ENOMEM. */
vd_rc vd_outfile_open(vd_outfile *o, const char *path, unsigned flags, vd_diag *d);

/* Flushes and closes the temporary, gives it the mode to keep, and renames
 * it over the target (stdout: flushes it).  Always releases o: on failure
 * the temporary is unlinked and the target is untouched.  VD_OK, VD_EIO. */
vd_rc vd_outfile_commit(vd_outfile *o, vd_diag *d);

/* Closes and unlinks the temporary; the target is untouched.  Accepts a
 * released or zeroed o. */
void vd_outfile_abort(vd_outfile *o);

#endif
