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

-- Minimum node count the job asked for; 1 when unset (NO_VAL or 0).
local function min_nodes(job_desc)
   local n = job_desc.min_nodes
   if n == nil or n == 0 or n == slurm.NO_VAL or n >= 0xfffffffe then
      return 1
   end
   return n
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

function slurm_job_submit(job_desc, part_list, submit_uid)
   local acpn, err = get_acpn(job_desc)
   if err ~= nil then
      slurm.log_user("ac: " .. err)
      return slurm.ERROR
   end
   if acpn == nil or acpn <= 0 then
      return slurm.SUCCESS
   end
   local nodes = min_nodes(job_desc)
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
