"""Lua text of the site-wide SitePackage.lua hook (`torchstack lmod-sitepackage`; docs/design.rst,
"The SitePackage hook").

The hook (SITEPACKAGE_HEAD, then lua.EVALUATOR, SITEPACKAGE_READER, SITEPACKAGE_BODY) checks
every loaded torch against every loaded consumer after each command that loads modules, by
evaluating the guard clauses recorded in each consumer's fingerprint file: it derives no rule,
so a consumer file without them (written before they were recorded) is refused. It
reads the fingerprint files of loaded modules fail-closed (SITEPACKAGE_READER): the file type
is checked with luaposix before the file is opened (non-blocking, checked again once open), at
most MAX_FINGERPRINT_BYTES are read, the JSON is read strictly and at most MAX_JSON_DEPTH
deep, and the fields the hook uses are checked. A file that exists but fails any of this is
refused with an LmodError naming it; only a path where nothing exists means "no fingerprint".
Each part is a template that `torchstack.guards.protocol` fills with the protocol's names.
"""

from __future__ import annotations

from torchstack.guards import lua, protocol

MAX_FINGERPRINT_BYTES = 65536
MAX_JSON_DEPTH = 16

HEAD_TEMPLATE = """\
-- SitePackage.lua written by `torchstack lmod-sitepackage`: the site-wide belt to the guards
-- that torchstack writes into PyTorch modules and their consumers.
--
-- After each command that can load modules (load, try-load, swap, restore, reset, update) the
-- finalize hook compares every loaded torch with every loaded consumer:
--   torches:   @PROVIDER_VARIABLE@ (a guarded PyTorch module), and every loaded module whose
--              EasyBuild root $EBROOT<NAME> holds @FINGERPRINT_FILE@
--              with role "provider";
--   consumers: the registrations in @CONSUMERS_VARIABLE@ (guarded modules), and every loaded
--              module whose fingerprint file has role "consumer" (modules without guards),
--              with the guard clauses recorded in that file.
-- It evaluates the clauses; it derives none (torchstack did when it recorded the file).
-- An unsafe mix is an LmodError: Lmod then writes no change and the environment stays as it
-- was. So is a loaded module whose fingerprint file exists but cannot be read (not a regular
-- file, over 64 KiB, not JSON, nested over 16 deep, wrong fields, a consumer without guard
-- clauses): what cannot be checked is refused, never taken as safe. The file type is checked
-- (with luaposix, which Lmod needs) before the file is opened, so that a FIFO or a device
-- cannot block Lmod. Read-only commands (list, avail, spider, show, ...) and unload/purge are
-- never refused.
-- Install: export LMOD_PACKAGE_PATH=<the directory of this file> for every user. Lmod keeps
-- one function a hook: a site that registers its own finalize hook merges the two by hand.
require("strict")
local hook = require("Hook")
local FrameStk = require("FrameStk")

do
"""

# read_regular(path), decode_json(text) and fingerprint_problem(fp) of the hook
READER_TEMPLATE = r"""
   local MAX_BYTES, MAX_DEPTH = @MAX_BYTES@, @MAX_DEPTH@
   local function want(name)
      local ok, lib = pcall(require, name)
      if ok then return lib end
      return nil
   end
   -- luaposix, which Lmod itself needs (its posix.* modules since luaposix 32)
   local pstat, pfcntl, punistd = want("posix.sys.stat"), want("posix.fcntl"), want("posix.unistd")
   local E = want("posix.errno") or {ENOENT = 2, ELOOP = 40}
   local KINDS = {{"S_ISDIR", "a folder"}, {"S_ISFIFO", "a FIFO"},
                  {"S_ISCHR", "a character device"}, {"S_ISBLK", "a block device"},
                  {"S_ISSOCK", "a socket"}}

   local function kind_of(mode)
      for _, k in ipairs(KINDS) do
         if pstat[k[1]](mode) ~= 0 then return k[2] end
      end
      return "not a regular file"
   end

   local function read_posix(path)
      local info, msg, code = pstat.stat(path)
      if not info then
         if code == E.ENOENT and not pstat.lstat(path) then return nil end  -- nothing there
         if code == E.ENOENT then return false, "is a dangling symlink" end
         if code == E.ELOOP then return false, "is a symlink loop" end
         return false, "cannot be read: " .. tostring(msg):gsub("^.*: ", "")
      end
      if pstat.S_ISREG(info.st_mode) == 0 then
         return false, "is " .. kind_of(info.st_mode) .. ", not a regular file"
      end
      if info.st_size > MAX_BYTES then return false, "is larger than " .. MAX_BYTES .. " bytes" end
      -- non-blocking, and checked again once open: a file swapped for a FIFO cannot block
      local fd, why = pfcntl.open(path, pfcntl.O_RDONLY + pfcntl.O_NONBLOCK + pfcntl.O_NOCTTY)
      if not fd then return false, "cannot be read: " .. tostring(why):gsub("^.*: ", "") end
      local opened = pstat.stat("/proc/self/fd/" .. fd)
      if opened and (opened.st_ino ~= info.st_ino or opened.st_dev ~= info.st_dev) then
         punistd.close(fd)
         return false, "changed while it was read"
      end
      local parts, size = {}, 0
      repeat
         local chunk = punistd.read(fd, MAX_BYTES + 1 - size)
         if chunk == nil then
            punistd.close(fd)
            return false, "cannot be read"
         end
         parts[#parts + 1], size = chunk, size + #chunk
      until chunk == "" or size > MAX_BYTES
      punistd.close(fd)
      if size > MAX_BYTES then return false, "is larger than " .. MAX_BYTES .. " bytes" end
      return table.concat(parts)
   end

   local function read_regular(path)
      -- the text of a regular file of at most MAX_BYTES; nil when nothing is there;
      -- false and why for anything else (a FIFO, a folder, a loop, too large, unreadable)
      if pstat and pfcntl and punistd then return read_posix(path) end
      return false, "cannot be checked: Lmod's Lua lacks luaposix (posix.sys.stat)"
   end

   local JSON_NULL, OBJECTS = {}, setmetatable({}, {__mode = "k"})
   local ESCAPES = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n",
                    r = "\r", t = "\t"}

   local function decode_json(text)
      -- strict JSON (RFC 8259), at most MAX_DEPTH nested arrays and objects deep, nothing
      -- after the value; nil and why otherwise. null is JSON_NULL.
      local utf8 = rawget(_G, "utf8")  -- Lua 5.3 and newer
      if utf8 and not utf8.len(text) then return nil, "is not UTF-8 text" end
      local pos, depth = 1, 0
      local function fail(what) error({why = what .. " at byte " .. pos}, 0) end
      local function skip() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
      local value
      local function str()
         local out = {}
         pos = pos + 1
         while true do
            local plain = text:match('^[^"\\%z\1-\31]*', pos)
            out[#out + 1], pos = plain, pos + #plain
            local c = text:sub(pos, pos)
            if c == '"' then
               pos = pos + 1
               return table.concat(out)
            elseif c ~= "\\" then
               fail(c == "" and "unterminated string" or "control character in a string")
            end
            local e = text:sub(pos + 1, pos + 1)
            if e == "u" then
               local hex = text:match("^%x%x%x%x", pos + 2)
               if not hex then fail("bad \\u escape") end
               local n = tonumber(hex, 16)
               if n < 0x80 then
                  out[#out + 1] = string.char(n)
               elseif n < 0x800 then
                  out[#out + 1] = string.char(0xC0 + math.floor(n / 64), 0x80 + n % 64)
               else
                  out[#out + 1] = string.char(0xE0 + math.floor(n / 4096),
                     0x80 + math.floor(n / 64) % 64, 0x80 + n % 64)
               end
               pos = pos + 6
            elseif ESCAPES[e] then
               out[#out + 1], pos = ESCAPES[e], pos + 2
            else
               fail("bad escape")
            end
         end
      end
      local function number()
         local int = text:match("^-?%d+", pos)
         if not int or int:match("^-?0%d") then fail("bad number") end
         local stop = pos + #int
         local frac = text:match("^%.%d+", stop)
         if frac then stop = stop + #frac end
         local exp = text:match("^[eE][+-]?%d+", stop)
         if exp then stop = stop + #exp end
         local n = tonumber(text:sub(pos, stop - 1))
         pos = stop
         return n
      end
      local function container(close, object)
         depth = depth + 1
         if depth > MAX_DEPTH then fail("nested deeper than " .. MAX_DEPTH) end
         local out = {}
         if object then OBJECTS[out] = true end
         pos = pos + 1
         skip()
         if text:sub(pos, pos) == close then
            pos, depth = pos + 1, depth - 1
            return out
         end
         while true do
            if object then
               if text:sub(pos, pos) ~= '"' then fail("expected a key") end
               local key = str()
               skip()
               if text:sub(pos, pos) ~= ":" then fail("expected ':'") end
               pos = pos + 1
               skip()
               out[key] = value()
            else
               out[#out + 1] = value()
            end
            skip()
            local c = text:sub(pos, pos)
            pos = pos + 1
            if c == close then
               depth = depth - 1
               return out
            end
            if c ~= "," then fail("expected ',' or '" .. close .. "'") end
            skip()
         end
      end
      value = function()
         local c = text:sub(pos, pos)
         if c == "{" then return container("}", true) end
         if c == "[" then return container("]", false) end
         if c == '"' then return str() end
         if c == "-" or c:match("%d") then return number() end
         for word, v in pairs({["true"] = true, ["false"] = false, null = JSON_NULL}) do
            if text:sub(pos, pos + #word - 1) == word then
               pos = pos + #word
               return v
            end
         end
         fail(c == "" and "unexpected end" or "unexpected character")
      end
      local ok, result = pcall(function()
         skip()
         local v = value()
         skip()
         if pos <= #text then fail("data after the JSON value") end
         return v
      end)
      if ok then return result end
      if type(result) == "table" then return nil, "is not JSON: " .. result.why end
      return nil, "is not JSON: " .. tostring(result)
   end

   -- the forms of compat.CLAUSE (an unknown one would only fail to hold)
   local CLAUSE_FORMS = {"^==%d[%d.]*$", "^!=%d[%d.]*$", "^>=%d[%d.]*$", "^<=%d[%d.]*$",
                         "^>%d[%d.]*$", "^<%d[%d.]*$", "^!=%d[%d.]*%.%*$",
                         "^release=%d[%w.]*$", "^flavour=%l+[%d.]*$", "^abi=%l[%l%d]*$"}

   local function is_clause(clause)
      if type(clause) ~= "string" then return false end
      for _, form in ipairs(CLAUSE_FORMS) do
         if clause:match(form) then return true end
      end
      return false
   end

   -- a consumer's file written before fingerprints carried their guard clauses
   local STALE = "records no guard_clauses (an older torchstack wrote it)"

   local function fingerprint_problem(fp)
      -- why a decoded file is no fingerprint the hook can use, nil when it is one
      local function opt(v, pattern)
         return v == nil or v == JSON_NULL or (type(v) == "string" and v:match(pattern) ~= nil)
      end
      if type(fp) ~= "table" or not OBJECTS[fp] then return "is not a JSON object" end
      if fp.schema ~= 1 then return "is not a fingerprint of schema 1" end
      if fp.role ~= "provider" and fp.role ~= "consumer" then
         return "has no role provider/consumer"
      end
      if type(fp.abi_tag) ~= "string" or not fp.abi_tag:match("^torch%-[%w._+-]+$") then
         return "has no valid abi_tag"
      end
      if type(fp.torch) ~= "table" or not OBJECTS[fp.torch] then return "has no torch object" end
      if not opt(fp.torch.release, "^%d[%w.]*$") then return "has a malformed torch.release" end
      if fp.role == "consumer" then
         local links = {cxx = true, stable = true, python = true}
         if not links[fp.link] then return "has no link cxx/stable/python" end
         local libraries = fp.torch_libraries
         if libraries ~= nil and libraries ~= JSON_NULL then
            if type(libraries) ~= "table" or OBJECTS[libraries] then
               return "has a malformed torch_libraries"
            end
            for _, lib in ipairs(libraries) do
               if type(lib) ~= "string" then return "has a malformed torch_libraries" end
            end
         end
         if fp.cuda_major ~= nil and fp.cuda_major ~= JSON_NULL
               and type(fp.cuda_major) ~= "number" then
            return "has a malformed cuda_major"
         end
         if not opt(fp.requires_torch, "^[%w%s.,<>=!~*+-]*$") then
            return "has a malformed requires_torch"
         end
         local clauses = fp.guard_clauses
         if clauses == nil or clauses == JSON_NULL then return STALE end
         if type(clauses) ~= "table" or OBJECTS[clauses] then
            return "has a malformed guard_clauses"
         end
         for _, clause in ipairs(clauses) do
            if not is_clause(clause) then return "has a malformed guard_clauses" end
         end
      end
      return nil
   end

   local function payload_of(fp)
      -- the payload a consumer guard of this fingerprint registers: its abi tag, then the
      -- guard clauses recorded with it (compat derived them; here they are only joined)
      local out = {fp.abi_tag}
      for _, clause in ipairs(fp.guard_clauses) do out[#out + 1] = clause end
      return table.concat(out, "@CLAUSE_SEPARATOR@")
   end
"""

BODY_TEMPLATE = """\
   local acting = {load = true, ["try-add"] = true, swap = true, restore = true,
                   reset = true, update = true}

   local function fingerprint_of(sn)
      -- EasyBuild's $EBROOT<NAME>: '+' -> plus, '-' -> min, '.' dropped, upper case.
      -- nil: no fingerprint file; false, path, why: one that cannot be read
      local name = sn:match("[^/]*$"):gsub("%+", "plus"):gsub("%-", "min"):gsub("%.", "")
      local root = os.getenv("EBROOT" .. name:upper())
      if not root then return nil end
      local path = root .. "/@FINGERPRINT_FILE@"
      local text, why = read_regular(path)
      if text == nil then return nil end
      if not text then return false, path, why end
      local fp
      fp, why = decode_json(text)
      if fp == nil then return false, path, why end
      why = fingerprint_problem(fp)
      if why then return false, path, why end
      return fp
   end

   local function loaded_torch()
      local torches, consumers, unreadable = {}, {}, {}
      for entry in (os.getenv("@CONSUMERS_VARIABLE@") or ""):gmatch("[^@DELIMITER@]+") do
         local who, kind, payload, home = entry:match("@ENTRY_PATTERN@")
         if who then consumers[who] = {kind = kind, payload = payload, home = home} end
      end
      local tag = os.getenv("@PROVIDER_VARIABLE@")
      if tag then torches[os.getenv("@MODULE_VARIABLE@") or "PyTorch"] = tag end
      for _, m in ipairs(FrameStk:singleton():mt():list("fullName", "active")) do
         local fp, path, why = fingerprint_of(m.sn)
         if fp == false then
            local again = (why == STALE) and "record it again" or "remove it and record it again"
            unreadable[#unreadable + 1] = "  " .. m.fullName .. ": " .. path .. " " .. why
               .. ": " .. again .. " (torchstack scan INSTALLPATH --record), "
               .. "or unload " .. m.fullName
         elseif fp and fp.role == "provider" then
            torches[m.fullName] = fp.abi_tag
         elseif fp and fp.role == "consumer" and not consumers[m.fullName] then
            consumers[m.fullName] = {kind = fp.link, payload = payload_of(fp)}
         end
      end
      return torches, consumers, unreadable
   end

   hook.register("finalize", function(command)
      if not acting[command] then return end
      local torches, consumers, unreadable = loaded_torch()
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
      local message = {}
      if #unreadable > 0 then
         table.sort(unreadable)
         message[1] = "torchstack: cannot check the torch of loaded modules, their "
            .. "fingerprint file cannot be read (refused, not taken as safe):\\n"
            .. table.concat(unreadable, "\\n")
      end
      if #refused > 0 then
         table.sort(refused)
         message[#message + 1] = "torchstack: this command would leave loaded modules on a "
            .. "torch they cannot use:\\n" .. table.concat(refused, "\\n")
      end
      if #message > 0 then LmodError(table.concat(message, "\\n")) end
   end)
end
"""

SITEPACKAGE_HEAD = lua.fill(HEAD_TEMPLATE)
SITEPACKAGE_READER = protocol.fill(READER_TEMPLATE, {"MAX_BYTES": str(MAX_FINGERPRINT_BYTES),
                                                     "MAX_DEPTH": str(MAX_JSON_DEPTH)})
SITEPACKAGE_BODY = lua.fill(BODY_TEMPLATE)
