"""Tcl text of the module guards (Lmod's Tcl support, Environment Modules 5).

The same protocol as the Lua text of `torchstack.guards.lua`, proc for function. Tcl modulefiles run
in an interpreter of their own, so the procs cannot clash with another module's.
"""

from __future__ import annotations

from torchstack.guards import protocol

# a registration's fields as a Tcl regular expression (ARE); the fourth may be missing
_FIELD = protocol.FIELD_SEPARATOR
ENTRY_PATTERN = "^" + f"([^{_FIELD}]*)\\{_FIELD}" * 3 + "?(.*)$"

_ESCAPES = {
    "\\": "\\\\", '"': '\\"', "$": "\\$", "[": "\\[", "]": "\\]", "{": "\\{", "}": "\\}",
    "\n": "\\n", "\r": "\\r", "\t": "\\t",
}


def tcl_string(text: str) -> str:
    """`text` as a double-quoted, ASCII-only Tcl word.

    Nothing in it is substituted, its braces never unbalance an enclosing body, and characters
    outside printable ASCII are `\\u` escapes: Lmod's embedded Tcl reads modulefiles as Latin-1.
    """
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code >= 0x7F:  # beyond the BMP: a surrogate pair, as Tcl 8.6 wants
            units = char.encode("utf-16-be")
            out += (f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# torchstack_fits: Lua's fits, for the recorded guard clauses (docs/design.rst, "Guard clauses";
# a new kind goes into torchstack_holds)
EVALUATOR_TEMPLATE = """\
proc torchstack_compare {a b {n 0}} {
    # numeric per dot-separated component; only the first n components when n > 0
    regexp {^[0-9.]*} $a a
    regexp {^[0-9.]*} $b b
    set x [regexp -all -inline {[0-9]+} $a]
    set y [regexp -all -inline {[0-9]+} $b]
    if {$n == 0} {set n [expr {max([llength $x], [llength $y])}]}
    for {set i 0} {$i < $n} {incr i} {
        set p 0
        set q 0
        scan [lindex $x $i] %d p
        scan [lindex $y $i] %d q
        if {$p != $q} {return [expr {$p < $q ? -1 : 1}]}
    }
    return 0
}
proc torchstack_holds {release abi flavour clause} {
    if {[regexp {^flavour=(.*)$} $clause -> wanted]} {return [expr {$wanted eq $flavour}]}
    if {[regexp {^abi=(.*)$} $clause -> wanted]} {return [expr {$wanted eq $abi}]}
    if {[regexp {^release=(.*)$} $clause -> wanted]} {
        regexp {^[0-9.]*(.*)$} $release -> have_rest
        regexp {^[0-9.]*(.*)$} $wanted -> wanted_rest
        return [expr {[torchstack_compare $release $wanted] == 0 && $have_rest eq $wanted_rest}]
    }
    if {![regexp {^([<>=!]=?)(.+)$} $clause -> op v]} {return 0}
    set n 0
    if {[string range $v end-1 end] eq ".*"} {
        set v [string range $v 0 end-2]
        set n [llength [split $v .]]
    }
    set c [torchstack_compare $release $v $n]
    switch -- $op {
        == {return [expr {$c == 0}]}
        != {return [expr {$c != 0}]}
        >= {return [expr {$c >= 0}]}
        <= {return [expr {$c <= 0}]}
        > {return [expr {$c > 0}]}
        < {return [expr {$c < 0}]}
    }
    return 0
}
proc torchstack_fits {tag kind payload} {
    set clauses [split $payload @CLAUSE_SEPARATOR@]
    if {$kind eq "cxx" && [llength $clauses] < 2} {return [expr {$tag eq [lindex $clauses 0]}]}
    set parsed [regexp {^torch-([^-]+)-([^-]+)-([^-]+)$} $tag -> release abi flavour]
    foreach clause [lrange $clauses 1 end] {
        if {$clause ne "" && !($parsed && [torchstack_holds $release $abi $flavour $clause])} {
            return 0
        }
    }
    return 1
}
proc torchstack_describe {payload} {
    set clauses [split $payload @CLAUSE_SEPARATOR@]
    if {[llength $clauses] < 2} {return [lindex $clauses 0]}
    return "[lindex $clauses 0] ([join [lrange $clauses 1 end] {, }])"
}
"""

# The errorCode of a refusal. Environment Modules (modulecmd.tcl 5.x) reports an `error` whose
# errorCode is MODULES_ERR_GLOBAL as its message alone, as it does its own evaluation errors;
# any other errorCode gets the modulefile's Tcl stack trace ("while executing ... invoked from
# within") after the message. Lmod ignores the errorCode and aborts the command either way.
ERROR_CODE = "MODULES_ERR_GLOBAL"

PROVIDER_TEMPLATE = """\
if {[module-info mode load] && [info exists env(@CONSUMERS_VARIABLE@)]} {
    set torchstack_refused {}
    foreach entry [split $env(@CONSUMERS_VARIABLE@) "@DELIMITER@"] {
        if {![regexp {@ENTRY_PATTERN@} $entry -> who kind payload home]} {
            continue
        }
        if {![torchstack_fits $torchstack_tag $kind $payload]} {
            set instead "use the torch module it was built with"
            if {$home ne ""} {set instead "use $home instead"}
            lappend torchstack_refused \\
                "  $who needs [torchstack_describe $payload]: $instead, or unload $who first"
        }
    }
    if {[llength $torchstack_refused]} {
        error "torchstack: cannot load $torchstack_name ($torchstack_tag); loaded modules\\
            need another torch:\\n[join $torchstack_refused \\n]" {} @ERROR_CODE@
    }
}
setenv @PROVIDER_VARIABLE@ $torchstack_tag
setenv @MODULE_VARIABLE@ $torchstack_name
"""

CONSUMER_TEMPLATE = """\
if {[module-info mode load] && [info exists env(@PROVIDER_VARIABLE@)]} {
    set torchstack_loaded $env(@PROVIDER_VARIABLE@)
    if {![torchstack_fits $torchstack_loaded $torchstack_kind $torchstack_payload]} {
        set other $torchstack_home
        regexp {^(.*)/} $torchstack_home -> other
        if {[info exists env(@MODULE_VARIABLE@)]} {set other $env(@MODULE_VARIABLE@)}
        error "torchstack: cannot load ${torchstack_name}: it needs\\
            [torchstack_describe $torchstack_payload] but $other ($torchstack_loaded) is\\
            loaded; load $torchstack_home instead (module swap $other $torchstack_home), or\\
            unload $other first" {} @ERROR_CODE@
    }
}
"""


def fill(template: str) -> str:
    """A Tcl template with the guard protocol's names and the registration pattern filled in."""
    return protocol.fill(template, {"ENTRY_PATTERN": ENTRY_PATTERN, "ERROR_CODE": ERROR_CODE})


EVALUATOR = fill(EVALUATOR_TEMPLATE)
PROVIDER = fill(PROVIDER_TEMPLATE)
CONSUMER = fill(CONSUMER_TEMPLATE)
