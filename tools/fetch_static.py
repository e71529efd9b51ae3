#!/usr/bin/env python3
"""Put a browser library's files into a folder, for the book and the slides to serve
themselves: no CDN.

    # MathJax's es5/ (the book's and slides' math)
    .venv/bin/python tools/fetch_static.py mathjax build/mathjax-3.2.2
    # reveal.js's dist/ and plugin/ (the slides)
    .venv/bin/python tools/fetch_static.py reveal.js build/reveal.js-5.1.0

Downloads the npm package once with the course's downloader (pooch, SHA-256 checked),
unpacks the parts the pages load into a temporary folder beside the target and renames
it into place, so an interrupted run leaves nothing half-made.
"""

import shutil
import sys
import tempfile
from pathlib import Path

import pooch

from nmt_lib.base.download import fetch

REGISTRY = "https://registry.npmjs.org"
# name: (version, SHA-256 of the npm tarball, its parts kept, the folder of the package
# that becomes the target, a file that says the target is complete)
PACKAGES = {
    "mathjax": (
        "3.2.2",
        "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09",
        ["package/es5"],
        "package/es5",
        "tex-chtml.js",
    ),
    "reveal.js": (
        "5.1.0",
        "524caf847e98033595943d994725dd357d20c7d07ad18afbaa932f1535e636e7",
        ["package/dist", "package/plugin"],
        "package",
        "dist/reveal.js",
    ),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in PACKAGES:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name, target = argv[0], Path(argv[1])
    version, sha256, parts, root, complete = PACKAGES[name]
    if (target / complete).is_file():
        return 0
    url = f"{REGISTRY}/{name}/-/{name}-{version}.tgz"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        untar = pooch.Untar(members=parts, extract_dir="unpacked")
        try:
            fetch(url, f"sha256:{sha256}", tmp, fname="package.tgz", processor=untar)
        except (OSError, ValueError) as e:
            how = f"Or fetch {url} by hand and unpack its {root}/ as {target}."
            print(f"{name}: {e} {how}", file=sys.stderr)
            return 1
        shutil.rmtree(target, ignore_errors=True)
        (Path(tmp) / "unpacked" / root).rename(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
