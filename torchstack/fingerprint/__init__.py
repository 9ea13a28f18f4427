"""The fingerprint, a contract (docs/design.rst, "The fingerprint"), and its rules: `read`
fingerprints a wheel, a site-packages folder or an install prefix; `fromjson` validates one
read back from JSON; `_version_py` reads torch's version.py as data; `compat` decides whether
a provider satisfies a consumer and turns the rules into guard clauses.

Nothing is imported here: each command loads only the modules it uses.
"""
