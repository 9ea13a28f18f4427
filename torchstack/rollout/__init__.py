"""Promote a source-built PyTorch over the wheel stack of the same release.

recipes: the easyconfig an installation keeps, and that easyconfig switched to another PyTorch;
plan: what each consumer of the wheel module needs on the source module;
defaults: the module defaults (Lmod and Tcl) that point users at one stack or the other.
"""
