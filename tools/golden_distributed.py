"""Golden values for forkload's PyTorch-compatible shuffle and sharding.

Writes tests/golden/distributed.txt, so that the C tests can check that
forkload's shuffle and distributed sharding are bit-identical to PyTorch's
without needing torch:

    /usr/bin/python3 tools/golden_distributed.py > tests/golden/distributed.txt

The output is deterministic; the record formats are described in its header.
"""

import math

import torch
from torch.utils.data.distributed import DistributedSampler

MASK32 = 0xFFFFFFFF
# 2**32 + 7 shows that the seed is taken mod 2**32; 2**64 - 1 is the largest
# seed manual_seed accepts.
RANDPERM_SEEDS = (0, 1, 42, 2**32 + 7, 2**64 - 1)
RANDPERM_NS = (0, 1, 2, 5, 7, 103, 1000)
SHARD_NS = (0, 1, 5, 7, 103, 1000)
WORLDS = (1, 2, 3, 8)
MODES = ("pad", "trim", "uneven")
EPOCHS = (0, 1, 2)
WIDE_SEEDS = (0, 42)
WIDE_NS = (1, 2, 5, 103, 1000)

HEADER = """\
# tools/golden_distributed.py, torch {version}
# Lines starting with # are comments; fields are separated by one space; a
# list after ':' may be empty.
# randperm SEED N : torch.randperm(N, generator seeded with SEED)
# shard N W MODE SHUFFLE SEED EPOCH RANK : the indices rank RANK of W draws
#   pad, trim: DistributedSampler(drop_last=False / True) after set_epoch
#   uneven: order[RANK::W], order being what DistributedSampler shuffles
#   (randperm(N) seeded with SEED + EPOCH, or 0..N-1) without padding
# randperm_wide SEED N : PyTorch 2.x's randperm for N >= 2**32 // 20 (64-bit
#   draws, inside-out Fisher-Yates) forced on small N; computed here from a
#   Python MT19937 proven equal to torch's on the randperm records"""


class MT19937:
    """The 32-bit Mersenne Twister as torch's CPU generator runs it."""

    def __init__(self, seed):
        # torch seeds with init_genrand, on the low 32 bits of the seed.
        mt = [seed & MASK32]
        for k in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + k) & MASK32)
        self.mt = mt
        self.index = 624

    def _twist(self):
        mt = self.mt
        for k in range(624):
            y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7FFFFFFF)
            mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF * (y & 1))
        self.index = 0

    def next32(self):
        if self.index == 624:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)

    def next64(self):
        # CPUGeneratorImpl::random64: the first draw is the high half.
        return (self.next32() << 32) | self.next32()


def randperm_forward32(seed, n):
    """torch.randperm in 1.13 for every N, in 2.x for N < 2**32 // 20."""
    gen = MT19937(seed)
    r = list(range(n))
    for i in range(n - 1):
        z = gen.next32() % (n - i)
        r[i], r[i + z] = r[i + z], r[i]
    return r


def randperm_inside_out64(seed, n):
    """torch 2.x's randperm for N >= 2**32 // 20: no initialisation pass."""
    gen = MT19937(seed)
    r = [0] * n
    for i in range(n):
        z = gen.next64() % (i + 1)
        r[i] = r[z]
        r[z] = i
    return r


def randperm(seed, n):
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=gen).tolist()


def order(n, shuffle, seed, epoch):
    """The order DistributedSampler shards, before padding or trimming."""
    return randperm(seed + epoch, n) if shuffle else list(range(n))


def documented_shard(indices, w, rank, drop_last):
    """DistributedSampler's rule, written out: the C side implements this."""
    n = len(indices)
    if drop_last and n % w:
        num_samples = math.ceil((n - w) / w)
    else:
        num_samples = math.ceil(n / w)
    total = num_samples * w
    # Padding repeats the order from its start as often as needed.
    padded = [indices[i % n] for i in range(total)]
    return padded[rank:total:w]


def shard(n, w, mode, shuffle, seed, epoch, rank):
    indices = order(n, shuffle, seed, epoch)
    if mode == "uneven":
        return indices[rank::w]
    sampler = DistributedSampler(range(n), num_replicas=w, rank=rank,
                                 shuffle=bool(shuffle), seed=seed,
                                 drop_last=mode == "trim")
    sampler.set_epoch(epoch)
    got = list(sampler)
    # torch 1.13 handles every case here, N = 0 included; the assertion
    # proves that the rule the C side follows is the one torch runs.
    assert got == documented_shard(indices, w, rank, mode == "trim")
    return got


def record(fields, values):
    return " ".join(map(str, (*fields, ":", *values)))


def main():
    print(HEADER.format(version=torch.__version__))
    for seed in RANDPERM_SEEDS:
        for n in RANDPERM_NS:
            perm = randperm(seed, n)
            # The randperm_wide records below rest on this Python MT.
            assert perm == randperm_forward32(seed, n), (seed, n)
            print(record(("randperm", seed, n), perm))
    cases = [(n, w, mode, shuffle, 0)
             for n in SHARD_NS for w in WORLDS for mode in MODES
             for shuffle in (0, 1)]
    cases += [(n, w, mode, 1, 12345)
              for n in (7, 103) for w in WORLDS for mode in MODES]
    for n, w, mode, shuffle, seed in cases:
        for epoch in EPOCHS:
            for rank in range(w):
                print(record(("shard", n, w, mode, shuffle, seed, epoch, rank),
                             shard(n, w, mode, shuffle, seed, epoch, rank)))
    for seed in WIDE_SEEDS:
        for n in WIDE_NS:
            print(record(("randperm_wide", seed, n),
                         randperm_inside_out64(seed, n)))


if __name__ == "__main__":
    main()
