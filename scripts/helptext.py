"""Help is text: whether a script's own arguments ask for it (`-h` or `--help` before any
`--`, after which they belong to the program it starts), and printing it. Every script of
scripts/ answers `-h`/`--help` with its text before it builds, probes or measures anything
(scripts/run_test.py checks each one). Standard library only; imports nothing of ours."""
import sys


def asked(argv):
    """Whether `-h` or `--help` is among `argv` before any `--`."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    return "-h" in own or "--help" in own


def answer(doc, argv=None):
    """Print `doc` and exit 0 where `argv` (default: this process's arguments) asks for help."""
    if asked(sys.argv[1:] if argv is None else list(argv)):
        print(doc.strip("\n"))
        sys.exit(0)


if __name__ == "__main__":
    print(__doc__)
