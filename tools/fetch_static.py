#!/usr/bin/env python3
"""Put MathJax's browser files (es5/) into a folder, for the book to serve itself: no CDN.

    python tools/fetch_mathjax.py build/mathjax-3.2.2

Downloads the npm package once, checks its SHA-256, unpacks `es5/` into a temporary folder
beside the target and renames it into place, so an interrupted run leaves nothing half-made.
"""
import hashlib
import io
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "3.2.2"
URL = f"https://registry.npmjs.org/mathjax/-/mathjax-{VERSION}.tgz"
SHA256 = "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    target = Path(argv[0])
    if (target / "tex-chtml.js").is_file():
        return 0
    print(f"fetching MathJax {VERSION} from {URL}", file=sys.stderr)
    try:
        with urllib.request.urlopen(URL, timeout=60) as response:
            data = response.read()
    except OSError as e:
        print(f"could not download {URL} ({e}). Fetch that file by hand and unpack its package/es5/ "
              f"folder as {target}.", file=sys.stderr)
        return 1
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        print(f"{URL} has SHA-256 {got}, expected {SHA256}; nothing was written.", file=sys.stderr)
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".mathjax-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("package/es5/") and m.isfile()]
            tar.extractall(tmp, members=members, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        (Path(tmp) / "package" / "es5").rename(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
