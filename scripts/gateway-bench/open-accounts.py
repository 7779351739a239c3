import json, urllib.request, sys
url = sys.argv[1]
for start in range(1, 10001, 1000):
    body = json.dumps([{"Open": {"id": i, "balance": 1000000, "flags": 0}} for i in range(start, start + 1000)]).encode()
    req = urllib.request.Request(url + "/v1/commands", data=body, headers={"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req))
    assert all(o["outcome"] == "done" for o in out), out[:3]
print("opened 10000")
