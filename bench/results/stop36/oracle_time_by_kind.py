import sqlite3,json,os,sys,statistics as st
db=sqlite3.connect(sys.argv[1]+'/store.sqlite')
rows=db.execute("select q.mutator,t.verdict_json,q.folder,t.symptom from tests t join queue q on q.case_id=t.case_id").fetchall()
agg={}
for m,v,f,sym in rows:
    d=json.loads(v); s=sum(d.get("timings",{}).values())
    meta=json.load(open(os.path.join(f,'meta.json'))); calls=json.load(open(os.path.join(f,'calls.json')))
    k=len(meta.get("pack_members") or []) or 1
    kind="pack" if k>1 else ("single" if len(calls)<=1 else "multi")
    a=agg.setdefault(kind,[0,0,0.0]); a[0]+=1; a[1]+=k; a[2]+=s
tot=sum(a[2] for a in agg.values())
for kind,(n,p,s) in agg.items(): print(f"{kind:7s} tests {n:4d} programs {p:4d} oracle-s {s:7.1f} ({100*s/tot:.0f}%) s/program {s/p:.2f}")
print("programs", sum(a[1] for a in agg.values()), "tests", len(rows), "oracle s", round(tot))
