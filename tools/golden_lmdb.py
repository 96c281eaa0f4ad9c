#!/usr/bin/python3
"""Write tests/golden/lmdb.mdb with Debian's python3-lmdb, and
tests/golden/lmdb.txt: the keys in the order python3-lmdb's cursor walks
them (hex), each with its value's size and the seed its bytes come from
(byte j of the value is (seed * 131 + j * 7) & 0xff).  The keys are put in
a scrambled order, some binary, some prefixes of others, one value past a
page (an overflow page), one empty.  Run with /usr/bin/python3 from the
top of the tree; lmdb_test reads both, and needs no Python."""
import os

import lmdb

KEYS = [b"b", b"ab", b"a", b"\x00z", b"\xff\x01", b"10", b"9", b"abc",
        b"sample/000", b"sample/001", b"\x80", b"Z"]
SIZES = [5, 17, 1, 64, 300, 8, 9, 5000, 33, 0, 255, 2]


def value(seed, size):
    return bytes((seed * 131 + j * 7) & 0xFF for j in range(size))


def main():
    path = "tests/golden/lmdb.mdb"
    if os.path.exists(path):
        os.remove(path)
    env = lmdb.open(path, subdir=False, lock=False, map_size=1 << 20)
    with env.begin(write=True) as txn:
        for seed, (k, n) in enumerate(zip(KEYS, SIZES)):
            txn.put(k, value(seed, n))
    env.close()
    env = lmdb.open(path, subdir=False, lock=False, readonly=True)
    with env.begin() as txn, open("tests/golden/lmdb.txt", "w") as out:
        out.write("# key (hex) size seed, in python3-lmdb's cursor order; "
                  "tools/golden_lmdb.py\n")
        for k, v in txn.cursor():
            seed = KEYS.index(k)
            assert v == value(seed, SIZES[seed])
            out.write("%s %d %d\n" % (k.hex(), len(v), seed))
    env.close()


if __name__ == "__main__":
    main()
