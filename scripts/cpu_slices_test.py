#!/usr/bin/env python3
"""cpu_slices.share on planted machines: python3 scripts/cpu_slices_test.py"""
import os, sys, unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_slices import share  # noqa: E402


class Share(unittest.TestCase):
    def test_eight_gpus_on_two_sockets_get_whole_cores_near_them(self):
        # socket 0: cores 0-15 with hyperthreads 32-47; socket 1: 16-31 with 48-63;
        # GPUs 0-3 hang off socket 0, 4-7 off socket 1
        sib = lambda c: {c % 32, c % 32 + 32}
        s0 = frozenset(range(0, 16)) | frozenset(range(32, 48))
        s1 = frozenset(range(16, 32)) | frozenset(range(48, 64))
        slices = share([s0] * 4 + [s1] * 4, sib)
        self.assertEqual(slices[0], [0, 1, 2, 3, 32, 33, 34, 35])
        self.assertEqual(slices[7], [28, 29, 30, 31, 60, 61, 62, 63])
        every = [c for s in slices for c in s]
        self.assertEqual(len(every), len(set(every)), "no CPU in two slices")
        for g, s in enumerate(slices):
            self.assertTrue(set(s) <= (s0 if g < 4 else s1), g)
            self.assertTrue(all(sib(c) <= set(s) for c in s), "a core stays whole")

    def test_too_few_cores_is_an_error(self):
        with self.assertRaises(ValueError):
            share([frozenset({0, 1})] * 3, lambda c: {c})

    def test_one_gpu_gets_every_cpu(self):
        self.assertEqual(share([frozenset(range(4))], lambda c: {c}), [[0, 1, 2, 3]])


if __name__ == "__main__":
    unittest.main()
