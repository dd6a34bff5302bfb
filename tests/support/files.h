/*
 * tests/support/files.h - the temporary files and whole-file reads of the
 * unit tests (each test file had its own mkstemp-then-close and its own
 * read-the-file-into-a-string).
 */
#ifndef VD_TEST_FILES_H
#define VD_TEST_FILES_H

/* Creates an empty private file from the template path (mkstemp: its
 * trailing XXXXXX replaced in place); fails the test when it cannot. */
void tfile_temp(char *path);

/* The same, the file holding text. */
void tfile_temp_text(char *path, const char *text);

/* The whole file, NUL-terminated (taken: the caller frees it), or NULL
 * when it cannot be opened. */
char *tfile_slurp(const char *path);

#endif
