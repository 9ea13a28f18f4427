"""Matched easyconfigs of a torch release: resolution, closure, toolchains, rendering, jobs."""
