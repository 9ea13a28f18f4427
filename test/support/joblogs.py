"""What eb writes: job outputs (a build that succeeded, failed or was killed) and submissions."""

SUCCEEDED = """\
== processing EasyBuild easyconfig /site/out/PyTorch-2.13.0-whl.eb
== COMPLETED: Installation ended successfully (took 23 secs)
== Results of the build can be found in the log file(s) /site/sw/PyTorch/easybuild/eb.log
== Build succeeded for 1 out of 1 (total: 23 secs)
"""
CHECKSUM_FAILED = """\
== fetching files and verifying checksums...
== FAILED: Installation ended unsuccessfully: Checksum verification for extension source \
t-1.0-py3-none-any.whl failed (took 0 secs)
== Results of the build can be found in the log file(s) /tmp/eb-x/easybuild-t-1.0.log
ERROR: Installation of t-1.0-whl.eb failed: Checksum verification for extension source \
t-1.0-py3-none-any.whl failed
"""
MISSING_DEPENDENCY = "== resolving dependencies ...\nERROR: Missing dependencies: Python/3.13.1\n"
KILLED = ("== installing...\nslurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-01-01T00:00:00 "
          "DUE TO TIME LIMIT ***\n")
SUBMISSION = ("== List of submitted jobs (3): PyTorch-2.13.0-whl (PyTorch/2.13.0-whl): 11; "
              "torchvision-0.28.0-whl (torchvision/0.28.0-whl): 12; "
              "torchaudio-2.13.0-whl (torchaudio/2.13.0-whl): 13\n")
