"""tools/nnscaler/test_roundtrip.py - Conv.round_trip tells a round trip from an accumulation.

Run from the repository root: python3 -m unittest tools.nnscaler.test_roundtrip

nnScaler's fused adapters can rewrite a tensor k with chunk(all_gather(k)),
taking back the piece k gave (issue 13: llama3_default dp2 pp16 tp2 nm2,
whose backward all-gathers a received gradient and chunks it back into the
same gradient).  That write is k := k and must be dropped; a chunk that
writes k from anything else is a second contribution and must be summed.
The cases below are small node lists in the converter's raw form."""
import types
import unittest

from .convert import Conv

K, X, OTHER = ("r1", 1), ("r1", 2), ("r1", 3)


def gather(ins, group=(0, 1), orders=(0, 4), dim=2):
    coll = {"members": dict(zip(group, orders)), "group": list(group)}
    return {"rank": 1, "op": "all_gather", "in": ins, "out": [X], "attrs": {"dim": dim}, "_coll": coll}


def chunk(index, chunks=2, dim=2, src=X):
    return {"rank": 1, "op": "chunk", "in": [src], "out": [K], "attrs": {"dim": dim, "index": index, "chunks": chunks}}


def decide(nodes, rewrite_k_between=False):
    """Runs round_trip on the last node as finish() does: writers and times of
    the nodes before it, in order."""
    conv = types.SimpleNamespace(raw=nodes)
    last_w, wtime, nseq = {}, {}, {}
    for i, n in enumerate(nodes[:-1]):
        nseq[i] = len(nseq)
        for k in n["out"]:
            last_w[k], wtime[k] = i, nseq[i]
    if rewrite_k_between:
        wtime[K] = len(nseq)
    return Conv.round_trip(conv, 1, len(nodes) - 1, nodes[-1], last_w, wtime, nseq)


class RoundTrip(unittest.TestCase):
    def setUp(self):
        self.recv = {"rank": 1, "op": "recv", "in": [], "out": [K], "attrs": {}}

    def test_own_piece_back_is_a_round_trip(self):
        # rank 1 is second in gather order (order 4 > 0): index 1 gives its own piece back
        self.assertTrue(decide([self.recv, gather([K]), chunk(1)]))

    def test_other_piece_is_a_contribution(self):
        self.assertFalse(decide([self.recv, gather([K]), chunk(0)]))

    def test_gather_order_not_rank_order(self):
        # members ordered by their slice start: rank 1 holds the first slice
        self.assertTrue(decide([self.recv, gather([K], orders=(4, 0)), chunk(0)]))
        self.assertFalse(decide([self.recv, gather([K], orders=(4, 0)), chunk(1)]))

    def test_gather_of_another_tensor_is_a_contribution(self):
        other = {"rank": 1, "op": "recv", "in": [], "out": [OTHER], "attrs": {}}
        self.assertFalse(decide([self.recv, other, gather([OTHER]), chunk(1)]))

    def test_k_rewritten_after_the_gather(self):
        self.assertFalse(decide([self.recv, gather([K]), chunk(1)], rewrite_k_between=True))

    def test_other_dim_or_chunk_count(self):
        self.assertFalse(decide([self.recv, gather([K]), chunk(1, dim=1)]))
        self.assertFalse(decide([self.recv, gather([K]), chunk(1, chunks=4)]))

    def test_not_from_a_gather(self):
        ident = {"rank": 1, "op": "identity", "in": [K], "out": [X], "attrs": {}}
        self.assertFalse(decide([self.recv, ident, chunk(1)]))


if __name__ == "__main__":
    unittest.main()
