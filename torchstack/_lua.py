"""Lua text of the module guards (Lmod): string literals and the code both halves share.

The code is written for Lmod's modulefile sandbox (string, table, math.max, os.getenv) and
kept in `do ... end` blocks, so none of its names reach the rest of the modulefile.
"""

from __future__ import annotations

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
# cxx: the payload's first field is the exact tag; otherwise every clause after it holds.
EVALUATOR = """\
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
   local function holds(release, flavour, clause)
      local wanted = clause:match("^flavour=(.*)$")
      if wanted then return wanted == flavour end
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
      if kind == "cxx" then return tag == payload:match("^[^,]*") end
      local release, flavour = tag:match("^torch%-([^-]+)%-[^-]+%-([^-]+)$")
      for clause in payload:gmatch(",([^,]+)") do
         if not (release and holds(release, flavour, clause)) then return false end
      end
      return true
   end
   local function describe(payload)
      local need, rest = payload:match("^([^,]*),?(.*)$")
      if rest == "" then return need end
      return need .. " (" .. rest:gsub(",", ", ") .. ")"
   end
"""

PROVIDER = """\
   if mode() == "load" then
      local refused = {}
      for entry in (os.getenv("TORCHSTACK_CONSUMERS") or ""):gmatch("[^;]+") do
         local who, kind, payload, home = entry:match("^([^|]*)|([^|]*)|([^|]*)|?(.*)$")
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
   setenv("TORCHSTACK_TORCH_ABI", tag)
   setenv("TORCHSTACK_TORCH_MODULE", name)
"""

CONSUMER = """\
   local loaded = os.getenv("TORCHSTACK_TORCH_ABI")
   if mode() == "load" and loaded and not fits(loaded, kind, payload) then
      local other = os.getenv("TORCHSTACK_TORCH_MODULE") or home:match("^(.*)/") or home
      LmodError("torchstack: cannot load " .. name .. ": it needs " .. describe(payload)
         .. " but " .. other .. " (" .. loaded .. ") is loaded; load " .. home
         .. " instead (module swap " .. other .. " " .. home .. "), or unload " .. other
         .. " first")
   end
"""

SITEPACKAGE_HEAD = """\
-- SitePackage.lua written by `torchstack lmod-sitepackage`: the site-wide belt to the guards
-- that torchstack writes into PyTorch modules and their consumers.
--
-- After each command that can load modules (load, try-load, swap, restore, reset, update) the
-- finalize hook compares every loaded torch with every loaded consumer:
--   torches:   TORCHSTACK_TORCH_ABI (a guarded PyTorch module), and every loaded module whose
--              EasyBuild root $EBROOT<NAME> holds easybuild/torchstack-fingerprint.json
--              with role "provider";
--   consumers: the registrations in TORCHSTACK_CONSUMERS (guarded modules), and every loaded
--              module whose fingerprint file has role "consumer" (modules without guards).
-- An unsafe mix is an LmodError: Lmod then writes no change and the environment stays as it
-- was. Read-only commands (list, avail, spider, show, ...) and unload/purge are never refused.
-- Install: export LMOD_PACKAGE_PATH=<the directory of this file> for every user. Lmod keeps
-- one function a hook: a site that registers its own finalize hook merges the two by hand.
require("strict")
local hook = require("Hook")
local json = require("json")
local FrameStk = require("FrameStk")

do
"""

SITEPACKAGE_BODY = """\
   local acting = {load = true, ["try-add"] = true, swap = true, restore = true,
                   reset = true, update = true}

   local function spec_clauses(spec, out)
      -- one PEP 440 clause as guard clauses, as torchstack.guards.specifier_clauses does
      local op, v = spec:match("^%s*([~=!<>]=?=?)%s*([^%s+]+)")
      if not op then return end
      local parts = {}
      for d in v:match("^[%d.]*"):gmatch("%d+") do parts[#parts + 1] = tonumber(d) end
      local release, wildcard = table.concat(parts, "."), v:sub(-2) == ".*"
      if op == "~=" or (op == "==" and wildcard) then
         local upper = {}
         for i = 1, (op == "~=") and #parts - 1 or #parts do upper[i] = parts[i] end
         if #upper == 0 then return end
         upper[#upper] = upper[#upper] + 1
         out[#out + 1] = ">=" .. release
         out[#out + 1] = "<" .. table.concat(upper, ".")
      elseif op == "!=" and wildcard then
         out[#out + 1] = "!=" .. release .. ".*"
      elseif #parts > 0 then
         out[#out + 1] = ((op == "===") and "==" or op) .. release
      end
   end

   local function payload_of(fp)
      -- the registration payload that the consumer guard of this fingerprint would carry
      local out = {fp.abi_tag}
      if fp.link == "stable" then
         local release = type(fp.torch) == "table" and fp.torch.release
         if type(release) == "string" then out[#out + 1] = ">=" .. release end
         local flavour = fp.abi_tag:match("%-([^-]+)$")
         if flavour and flavour ~= "cpu" then out[#out + 1] = "flavour=" .. flavour end
      end
      if fp.link ~= "cxx" and type(fp.requires_torch) == "string" then
         for spec in fp.requires_torch:gmatch("[^,]+") do spec_clauses(spec, out) end
      end
      return table.concat(out, ",")
   end

   local function fingerprint_of(sn)
      -- EasyBuild's $EBROOT<NAME>: '+' -> plus, '-' -> min, '.' dropped, upper case
      local name = sn:match("[^/]*$"):gsub("%+", "plus"):gsub("%-", "min"):gsub("%.", "")
      local root = os.getenv("EBROOT" .. name:upper())
      local f = root and io.open(root .. "/easybuild/torchstack-fingerprint.json")
      if not f then return nil end
      local ok, fp = pcall(json.decode, f:read("*a"))
      f:close()
      if ok and type(fp) == "table" and type(fp.abi_tag) == "string" then return fp end
      return nil
   end

   local function loaded_torch()
      local torches, consumers = {}, {}
      for entry in (os.getenv("TORCHSTACK_CONSUMERS") or ""):gmatch("[^;]+") do
         local who, kind, payload, home = entry:match("^([^|]*)|([^|]*)|([^|]*)|?(.*)$")
         if who then consumers[who] = {kind = kind, payload = payload, home = home} end
      end
      local tag = os.getenv("TORCHSTACK_TORCH_ABI")
      if tag then torches[os.getenv("TORCHSTACK_TORCH_MODULE") or "PyTorch"] = tag end
      for _, m in ipairs(FrameStk:singleton():mt():list("fullName", "active")) do
         local fp = fingerprint_of(m.sn)
         if fp and fp.role == "provider" then
            torches[m.fullName] = fp.abi_tag
         elseif fp and fp.role == "consumer" and not consumers[m.fullName] then
            consumers[m.fullName] = {kind = fp.link, payload = payload_of(fp)}
         end
      end
      return torches, consumers
   end

   hook.register("finalize", function(command)
      if not acting[command] then return end
      local torches, consumers = loaded_torch()
      local refused = {}
      for torch, tag in pairs(torches) do
         for who, need in pairs(consumers) do
            if not fits(tag, need.kind, need.payload) then
               -- a registration names the torch module to load instead; a fingerprint does not
               local instead = (need.home and need.home ~= "")
                  and "load " .. need.home .. " or unload " .. who
                  or "unload " .. who .. " or load the torch module it was built with"
               refused[#refused + 1] = "  " .. who .. " needs " .. describe(need.payload)
                  .. ", not " .. torch .. " (" .. tag .. "): " .. instead
            end
         end
      end
      if #refused > 0 then
         table.sort(refused)
         LmodError("torchstack: this command would leave loaded modules on a torch they "
            .. "cannot use:\\n" .. table.concat(refused, "\\n"))
      end
   end)
end
"""
