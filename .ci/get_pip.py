"""Stand-in for the get-pip.py that ansible-test downloads to bootstrap pip into its sanity venvs.

ansible-test fetches get-pip.py from ci-files.testing.ansible.com, which is out of reach here (the
only network is the package registries). It runs the script as ``python get_pip.py
--disable-pip-version-check pip==X [--no-setuptools] [--no-wheel]`` inside a venv created without
pip. This does the same from the interpreter's own bundled pip (ensurepip), then installs the
requested pip version from the package index. `.ci/sanity` puts it where ansible-test caches the
script (``~/.ansible/test/cache/get_pip_<version>.py``, under a HOME private to the checkout).
"""

import subprocess
import sys

IGNORED = {"--no-setuptools", "--no-wheel"}

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *[a for a in sys.argv[1:] if a not in IGNORED]])
