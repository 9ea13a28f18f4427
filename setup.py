"""Package discovery, which setup.cfg cannot combine with the two mapped folders.

Every package under torchstack/ is found, so that a new subpackage cannot go missing from the
wheel (torchstack.venv and torchstack.rollout once did); easyblocks/, templates/ and
easyconfigs/ are installed as torchstack.easyblocks, torchstack.templates and
torchstack.easyconfigs (package_dir in setup.cfg).
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["torchstack", "torchstack.*"]),
                "torchstack.easyblocks", "torchstack.templates", "torchstack.easyconfigs"])
