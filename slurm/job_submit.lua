--[[
job_submit.lua - turn `--acpn=N` (accelerators per node, from spank_ac.so)
into a request for N x nodes `ac` licenses.

The `ac` license pool (Licenses=ac:TOTAL in slurm.conf) stands for the
accelerators ARM can hand out; requesting them as licenses makes Slurm's
scheduler (with bf_licenses) hold a job until enough are free, and the
controller prolog then asks ARM for the actual devices.

spank_ac.so puts ACPN=N into the job control environment, which reaches us as
"ACPN=N" in job_desc.spank_job_env (a table of "NAME=value" strings).
Install next to slurm.conf with JobSubmitPlugins=lua.
--]]

local LICENSE = "ac"

-- ACPN from the job's SPANK environment, or nil. Accepts the SPANK_ prefix
-- too, in case a Slurm version hands the variables over already prefixed.
local function get_acpn(job_desc)
   local env = job_desc.spank_job_env
   if env == nil then
      return nil
   end
   for _, kv in pairs(env) do
      local v = string.match(kv, "^ACPN=(.*)$") or
                string.match(kv, "^SPANK_ACPN=(.*)$")
      if v ~= nil then
         -- The plugin validated it already; re-check because anyone can
         -- forge the job control environment through the Slurm API.
         if not string.match(v, "^%d+$") then
            return nil, "invalid ACPN value '" .. v .. "'"
         end
         return tonumber(v)
      end
   end
   return nil
end

-- A node count the job asked for, or nil when unset (NO_VAL or 0).
local function node_count(n)
   if n == nil or n == 0 or n == slurm.NO_VAL or n >= 0xfffffffe then
      return nil
   end
   return n
end

-- How many nodes to count licenses for: the most a node range (-N1-2) may get,
-- since the prolog binds --acpn on every node Slurm gives; else the least
-- (1 when unset). A job that gives only a task count may still be spread over
-- more nodes: the manager's prolog then grows the count in Slurm first, or
-- binds on as many nodes as Slurm counted.
local function nodes_to_count(job_desc)
   return node_count(job_desc.max_nodes) or node_count(job_desc.min_nodes) or 1
end

-- Rebuild the job's license string with `ac:<count>`, dropping any `ac`
-- entry the user gave explicitly (`ac`, `ac:K` or `ac*K`) and keeping the
-- other licenses as they were.
local function with_ac(licenses, count)
   local out = {}
   if licenses ~= nil then
      for item in string.gmatch(licenses, "[^,]+") do
         local name = string.match(item, "^%s*([^:*%s]+)")
         if name ~= LICENSE and name ~= nil then
            table.insert(out, item)
         end
      end
   end
   -- %d, not .., so a float count (Lua 5.3 numbers from C) prints as "4".
   table.insert(out, string.format("%s:%d", LICENSE, count))
   return table.concat(out, ",")
end

-- The pool: the `ac` count of `Licenses=` in slurm.conf (SLURM_CONF, else
-- Slurm's default path), read at each submission so that a reconfigured total
-- counts at once; nil when it cannot be read (Slurm still refuses a request
-- above its total, in fewer words).
local function pool_total()
   local path = os.getenv("SLURM_CONF") or "/etc/slurm/slurm.conf"
   local conf = io.open(path, "r")
   if conf == nil then
      return nil
   end
   local total = nil
   for line in conf:lines() do
      local list = string.match(line, "^%s*[Ll][Ii][Cc][Ee][Nn][Ss][Ee][Ss]%s*=%s*(%S+)")
      if list ~= nil then
         for item in string.gmatch(list, "[^,]+") do
            local name, count = string.match(item, "^([^:*]+)[:*]?(%d*)$")
            if name == LICENSE then
               total = tonumber(count) or 1
            end
         end
      end
   end
   conf:close()
   return total
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local acpn, err = get_acpn(job_desc)
   if err ~= nil then
      slurm.log_user("ac: " .. err)
      return slurm.ERROR
   end
   if acpn == nil or acpn <= 0 then
      return slurm.SUCCESS
   end
   -- A heterogeneous job's components are bound one by one, and --acpn given
   -- before the first ':' reaches every component: what a component was meant
   -- to get cannot be told. Refused in words; AC_Get works in any component.
   local offset = job_desc.het_job_offset
   if offset ~= nil and offset ~= slurm.NO_VAL and offset < 0xfffffffe then
      slurm.log_user("ac: --acpn is not supported on heterogeneous jobs (component " ..
                     offset .. " asks for " .. acpn .. " per node): submit the " ..
                     "components as separate jobs, or call AC_Get at run time")
      return slurm.ERROR
   end
   local nodes = nodes_to_count(job_desc)
   local total = pool_total()
   if total ~= nil and nodes * acpn > total then
      slurm.log_user(string.format("ac: --acpn=%d on %d node(s) asks for %d accelerator(s) in all; " ..
                                   "the pool holds %d (Licenses=%s:%d)", acpn, nodes, nodes * acpn,
                                   total, LICENSE, total))
      return slurm.ERROR
   end
   local before = job_desc.licenses
   job_desc.licenses = with_ac(before, nodes * acpn)
   slurm.log_info("ac: uid %d acpn=%d nodes=%d licenses '%s' -> '%s'",
                  submit_uid, acpn, nodes, tostring(before or ""),
                  job_desc.licenses)
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("ac: job_submit.lua loaded")
return slurm.SUCCESS
