"""Matched easyconfigs of a torch release: resolution, closure, toolchains, CUDA modules, module
names, suffixes and ABI of official wheels, rendering, stage 2, the plan that ties them, jobs."""
