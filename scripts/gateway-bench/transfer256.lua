-- 256 random transfers per request between accounts 1..10000, keep-alive.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local parts = {}
  for i = 1, 256 do
    local from = math.random(1, 10000)
    parts[i] = string.format('{"Transfer": {"from": %d, "to": %d, "amount": 1}}', from, from % 10000 + 1)
  end
  return wrk.format(nil, "/v1/commands", nil, "[" .. table.concat(parts, ",") .. "]")
end
