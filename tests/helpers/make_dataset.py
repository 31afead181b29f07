#!/usr/bin/env python3
"""make_dataset.py ROOT SEED COUNT MAX_BYTES BIG_NAME=MIB...: the staging tests' data set.

COUNT small files (1 byte to MAX_BYTES, random) in 30 nested directories whose names have
spaces, accents, Greek and CJK, an empty file, and big/BIG_NAME files of MIB MiB each. The
same SEED gives the same bytes (tests/stage_test.sh, tests/stage_rgw_test.sh)."""
import os
import random
import sys

root, seed, count, max_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(seed)
for i in range(count):
    d = os.path.join(root, "set %d" % (i % 10), ["alpha", "bêta", "γάμμα"][i % 3])
    os.makedirs(d, exist_ok=True)
    name = ["obj %04d" % i, "é-%04d.bin" % i, "k%04d" % i, "数据 %04d" % i][i % 4]
    with open(os.path.join(d, name), "wb") as f:
        f.write(rnd.randbytes(rnd.randint(1, max_bytes)))
open(os.path.join(root, "empty"), "wb").close()
os.makedirs(os.path.join(root, "big"), exist_ok=True)
for spec in sys.argv[5:]:
    name, mib = spec.rsplit("=", 1)
    with open(os.path.join(root, "big", name), "wb") as f:
        for _ in range(int(mib)):
            f.write(rnd.randbytes(1 << 20))
