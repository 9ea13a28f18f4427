"""Module guards: the guard protocol, Lua and Tcl text, module-file placement, scan."""
