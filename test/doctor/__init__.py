"""`torchstack doctor` tests, one file per module of torchstack/doctor.

A package so that its conftest.py is imported as `doctor.conftest`: a second top-level
`conftest` module would displace test/conftest.py, which tests import by that name.
"""
