"""EasyBuild hooks file: `eb --hooks "$(torchstack hooks-path)" ...`.

Fingerprinting and module guards for installations made by any easyblock arrive with the
swap-guards work; until then this file defines no hooks, so using it changes nothing.
"""
