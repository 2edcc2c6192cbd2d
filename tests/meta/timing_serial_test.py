"""The suites with wall-clock deadlines run alone under `ctest -j`: every
CTest entry of Store, Spawner, Placement and SpawnedRanks has RUN_SERIAL.

    timing_serial_test.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

SUITES = ("Store.", "Spawner.", "Placement.", "SpawnedRanks.")


def main() -> int:
    ctest, build = sys.argv[1], sys.argv[2]
    out = subprocess.run([ctest, "--test-dir", build, "-N", "--show-only=json-v1"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    tests = json.loads(out)["tests"]
    timing = [t for t in tests if t["name"].startswith(SUITES)]
    if not timing:
        print("FAIL: no Store/Spawner/Placement/SpawnedRanks entry found")
        return 1
    loose = [t["name"] for t in timing
             if not any(p["name"] == "RUN_SERIAL" and p["value"] for p in t.get("properties", []))]
    for name in loose:
        print(f"FAIL: {name} runs beside other tests (no RUN_SERIAL)")
    print(f"{len(timing) - len(loose)} of {len(timing)} timing entries run alone")
    return 1 if loose else 0


if __name__ == "__main__":
    sys.exit(main())
