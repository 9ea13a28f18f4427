"""ELF reading and loading, one subject: `reader` reads the dynamic section and dynamic symbols
of a shared object through pyelftools; `symbols` says what libtorch's symbol and library names
mean (and which names are shared objects); `linkclass` decides how a consumer links libtorch;
`loader` finds each DT_NEEDED library as glibc's ld.so would.

Nothing is imported here: each command loads only the modules it uses (importing pyelftools
and torch-abi-audit is a good part of a command's start-up; the figures: bench/README.rst).
"""
