#!/usr/bin/env python3
"""Put a browser library's files into a folder, for the book and the slides to serve
themselves: no CDN.

    # MathJax's es5/ (the book's and slides' math)
    python tools/fetch_static.py mathjax build/mathjax-3.2.2
    # reveal.js's dist/ and plugin/ (the slides)
    python tools/fetch_static.py reveal.js build/reveal.js-5.1.0

Downloads the npm package once, checks its SHA-256, unpacks the parts the pages load
into a temporary folder beside the target and renames it into place, so an interrupted
run leaves nothing half-made.
"""

import hashlib
import io
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

# name: (version, SHA-256 of the npm tarball, the folder of the package that becomes the
# target, its parts kept, a file that says the target is complete)
PACKAGES = {
    "mathjax": (
        "3.2.2",
        "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09",
        "package/es5/",
        ("",),
        "tex-chtml.js",
    ),
    "reveal.js": (
        "5.1.0",
        "524caf847e98033595943d994725dd357d20c7d07ad18afbaa932f1535e636e7",
        "package/",
        ("dist/", "plugin/"),
        "dist/reveal.js",
    ),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in PACKAGES:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name, target = argv[0], Path(argv[1])
    version, sha256, root, parts, complete = PACKAGES[name]
    if (target / complete).is_file():
        return 0
    url = f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"
    print(f"fetching {name} {version} from {url}", file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except OSError as e:
        print(
            f"could not download {url} ({e}). Fetch that file by hand and unpack its"
            f" {root} folder as {target}.",
            file=sys.stderr,
        )
        return 1
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        print(
            f"{url} has SHA-256 {got}, expected {sha256}; nothing was written.",
            file=sys.stderr,
        )
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile() and any(m.name.startswith(root + p) for p in parts)
            ]
            tar.extractall(tmp, members=members, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        (Path(tmp) / root).rename(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
