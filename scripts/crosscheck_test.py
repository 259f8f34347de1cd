"""Tests of scripts/crosscheck.py that need no GPU: bad input, and the ops it rebuilds."""
import csv
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import crosscheck  # noqa: E402

COLUMNS = ["op", "variant", "site", "batch", "kv_len", "dims", "dtype", "mode", "status",
           "median_ns", "note"]


def run(run_dir, *args):
    p = subprocess.run([sys.executable, str(HERE / "crosscheck.py"), str(run_dir), *args],
                       capture_output=True, text=True)
    return p.returncode, p.stderr


def write(run_dir, rows, columns=COLUMNS):
    with (Path(run_dir) / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


LINEAR = {"op": "linear", "variant": "aten", "site": "q_proj", "batch": "1", "kv_len": "",
          "dims": "m=2 n=6 k=4", "dtype": "f32", "mode": "device", "status": "ok",
          "median_ns": "4000", "note": ""}


class BadInput(unittest.TestCase):
    def test_missing_results(self):
        with tempfile.TemporaryDirectory() as d:
            code, err = run(d)
            self.assertEqual(code, 2)
            self.assertIn("results.csv: missing", err)

    def test_missing_column(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [LINEAR], [c for c in COLUMNS if c != "median_ns"])
            code, err = run(d)
            self.assertEqual(code, 2)
            self.assertIn("missing column `median_ns`", err)

    def test_no_device_rows(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [dict(LINEAR, mode="pipelined")])
            code, err = run(d)
            self.assertEqual(code, 2)
            self.assertIn("no ok device-mode rows", err)

    def test_bad_allocations(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [LINEAR])
            code, err = run(d, "--allocations", "0")
            self.assertEqual(code, 2)
            self.assertIn("--allocations must be at least 1", err)


class Rebuild(unittest.TestCase):
    """The callables it times compute the row's op at the row's shape (checked on the CPU)."""

    def setUp(self):
        import torch
        self.torch = torch

    def test_dims(self):
        self.assertEqual(crosscheck.parse_dims("m=1 n=2048 k=1024"), {"m": 1, "n": 2048, "k": 1024})

    def test_linear_shapes(self):
        y = crosscheck.build(self.torch, LINEAR, dev="cpu")()
        self.assertEqual(tuple(y.shape), (2, 6))
        parts = crosscheck.build(self.torch, dict(LINEAR, variant="fused_gate_up"), dev="cpu")()
        self.assertEqual([tuple(p.shape) for p in parts], [(2, 3), (2, 3)])

    def test_sdpa_math_is_attention(self):
        row = {"op": "sdpa", "variant": "math", "dtype": "f32", "note": "",
               "dims": "batch=2 q_heads=4 kv_heads=2 q_len=1 kv_len=5 head_dim=8 causal=0"}
        torch = self.torch
        torch.manual_seed(0)
        fn = crosscheck.build(torch, row, dev="cpu")
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        self.assertEqual(tuple(out.shape), (2, 4, 1, 8))
        # the same inputs again (same seed), by hand: softmax(q k^T / sqrt(d)) v, K/V shared
        # by pairs of query heads
        torch.manual_seed(0)
        q = torch.randn(2, 1, 4, 8).transpose(1, 2).double()
        k = torch.randn(2, 2, 5, 8).double().repeat_interleave(2, dim=1)
        v = torch.randn(2, 2, 5, 8).double().repeat_interleave(2, dim=1)
        ref = torch.softmax(q @ k.transpose(2, 3) / 8 ** 0.5, dim=-1) @ v
        self.assertLess((out.double() - ref).abs().max().item(), 1e-5)

    def test_unknown_op(self):
        self.assertIsNone(crosscheck.build(self.torch, dict(LINEAR, op="rope"), dev="cpu"))


if __name__ == "__main__":
    unittest.main()
