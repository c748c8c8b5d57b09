#!/usr/bin/env bash
# Regenerates the screenshots that the README, the lessons and docs/see-it-run/README.md
# show: the browser test's own screenshots, of a fresh trace, saved in
# docs/see-it-run/images/. Needs chromium, chromium-driver and python3-selenium.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --workflow --preset see-it-run
python=python3
python3 -c "import selenium" 2>/dev/null || python=/usr/bin/python3  # Debian's python3-selenium
"$python" tests/test_see_it_run.py --page build-see-it-run/see-it-run --screenshots docs/see-it-run/images
