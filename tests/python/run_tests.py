"""Runs the Python CPU tests (test_*.py beside this file) for CTest, and fails
when none ran: before Python 3.12 `python -m unittest discover` exits 0 after
"Ran 0 tests", so a renamed file or a filter that matches nothing passed.

    run_tests.py [-k PATTERN]...    (unittest's -k: substring or fnmatch)
"""
import argparse
import os
import sys
import unittest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", dest="patterns", action="append", default=None)
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in args.patterns]
    suite = loader.discover(here, pattern="test_*.py", top_level_dir=here)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if result.testsRun == 0:
        print("FAIL: no Python test matches the selection: nothing ran")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
