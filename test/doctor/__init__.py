"""`torchstack doctor` tests, one file per module of torchstack/doctor.

A package so that its modules are imported as `doctor.<name>`: test/index has a
test_consumers.py too, and two top-level `test_consumers` modules would clash.
"""
