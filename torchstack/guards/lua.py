"""Lua text of the module guards (Lmod): string literals and the code both halves share.

The code is written for Lmod's modulefile sandbox (string, table, math.max, os.getenv) and
kept in `do ... end` blocks, so none of its names reach the rest of the modulefile.
"""

from __future__ import annotations

from torchstack.guards import protocol

# a registration's fields as a Lua pattern; the fourth (the provider module) may be missing
_FIELD = protocol.FIELD_SEPARATOR
ENTRY_PATTERN = "^" + f"([^{_FIELD}]*){_FIELD}" * 3 + "?(.*)$"

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def lua_string(text: str) -> str:
    """`text` as a double-quoted Lua literal; other control characters as `\\ddd`."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03d}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# fits(tag, kind, payload): does the torch of abi tag `tag` satisfy a registered requirement?
# cxx without clauses: the payload's first field is the exact tag; otherwise every clause
# after it holds.
# The clauses are those recorded with a consumer's fingerprint; a new kind is a new test in
# holds (docs/design.rst, "Guard clauses").
EVALUATOR_TEMPLATE = """\
   local function compare(a, b, n)
      -- numeric per dot-separated component; only the first n components when n is given
      local x, y = {}, {}
      for d in a:match("^[%d.]*"):gmatch("%d+") do x[#x + 1] = tonumber(d) end
      for d in b:match("^[%d.]*"):gmatch("%d+") do y[#y + 1] = tonumber(d) end
      for i = 1, n or math.max(#x, #y) do
         local p, q = x[i] or 0, y[i] or 0
         if p ~= q then return p < q and -1 or 1 end
      end
      return 0
   end
   local function holds(release, abi, flavour, clause)
      local wanted = clause:match("^flavour=(.*)$")
      if wanted then return wanted == flavour end
      wanted = clause:match("^abi=(.*)$")
      if wanted then return wanted == abi end
      wanted = clause:match("^release=(.*)$")
      if wanted then
         return compare(release, wanted) == 0
            and release:match("^[%d.]*(.*)$") == wanted:match("^[%d.]*(.*)$")
      end
      local op, v = clause:match("^([<>=!]=?)(.+)$")
      if not op then return false end
      local n = nil
      if v:sub(-2) == ".*" then  -- !=2.13.* compares the first two components
         v = v:sub(1, -3)
         local _, dots = v:gsub("%.", "")
         n = dots + 1
      end
      local c = compare(release, v, n)
      local tests = {["=="] = c == 0, ["!="] = c ~= 0, [">="] = c >= 0,
                     ["<="] = c <= 0, [">"] = c > 0, ["<"] = c < 0}
      return tests[op] == true
   end
   local function fits(tag, kind, payload)
      local own = payload:match("^[^@CLAUSE_SEPARATOR@]*")
      if kind == "cxx" and own == payload then return tag == own end
      local release, abi, flavour = tag:match("^torch%-([^-]+)%-([^-]+)%-([^-]+)$")
      for clause in payload:gmatch("@CLAUSE_SEPARATOR@([^@CLAUSE_SEPARATOR@]+)") do
         if not (release and holds(release, abi, flavour, clause)) then return false end
      end
      return true
   end
   local function describe(payload)
      local need, rest = payload:match("^([^@CLAUSE_SEPARATOR@]*)@CLAUSE_SEPARATOR@?(.*)$")
      if rest == "" then return need end
      return need .. " (" .. rest:gsub("@CLAUSE_SEPARATOR@", ", ") .. ")"
   end
"""

PROVIDER_TEMPLATE = """\
   if mode() == "load" then
      local refused = {}
      for entry in (os.getenv("@CONSUMERS_VARIABLE@") or ""):gmatch("[^@DELIMITER@]+") do
         local who, kind, payload, home = entry:match("@ENTRY_PATTERN@")
         if who and not fits(tag, kind, payload) then
            local instead = home ~= "" and "use " .. home .. " instead"
               or "use the torch module it was built with"
            refused[#refused + 1] = "  " .. who .. " needs " .. describe(payload) .. ": "
               .. instead .. ", or unload " .. who .. " first"
         end
      end
      if #refused > 0 then
         LmodError("torchstack: cannot load " .. name .. " (" .. tag .. "); loaded modules "
            .. "need another torch:\\n" .. table.concat(refused, "\\n"))
      end
   end
   setenv("@PROVIDER_VARIABLE@", tag)
   setenv("@MODULE_VARIABLE@", name)
"""

CONSUMER_TEMPLATE = """\
   local loaded = os.getenv("@PROVIDER_VARIABLE@")
   if mode() == "load" and loaded and not fits(loaded, kind, payload) then
      local other = os.getenv("@MODULE_VARIABLE@") or home:match("^(.*)/") or home
      LmodError("torchstack: cannot load " .. name .. ": it needs " .. describe(payload)
         .. " but " .. other .. " (" .. loaded .. ") is loaded; load " .. home
         .. " instead (module swap " .. other .. " " .. home .. "), or unload " .. other
         .. " first")
   end
"""


def fill(template: str) -> str:
    """A Lua template with the guard protocol's names and the registration pattern filled in."""
    return protocol.fill(template, {"ENTRY_PATTERN": ENTRY_PATTERN})


EVALUATOR = fill(EVALUATOR_TEMPLATE)
PROVIDER = fill(PROVIDER_TEMPLATE)
CONSUMER = fill(CONSUMER_TEMPLATE)
