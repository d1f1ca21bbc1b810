# Include cycles between modules (a header and its sources), files (with an argument) and folders: run from the
# repository root; prints each cycle found (an empty list: none).
import os,re,subprocess,collections,sys
files=subprocess.check_output(['git','ls-files','*.h','*.cpp','*.cu','*.cuh'],text=True).split()
inc=re.compile(r'#include "([^"]+)"')
def mod(p): return p if FILELEVEL else os.path.splitext(p)[0]
FILELEVEL=len(sys.argv)>1
def folder(p):
    parts=p.split('/')
    if parts[0]=='framework' and len(parts)>2:
        return '/'.join(parts[:3]) if parts[1]=='distributed' and len(parts)>3 else '/'.join(parts[:2])
    return parts[0]
G=collections.defaultdict(set); F=collections.defaultdict(set)
fs=set(files)
for f in files:
    if f.startswith(('tests/','examples/')): continue
    for m in inc.findall(open(f,errors='ignore').read()):
        if m in fs:
            if mod(m)!=mod(f): G[mod(f)].add(mod(m))
            if folder(m)!=folder(f): F[folder(f)].add(folder(m))
def sccs(G):
    idx={};low={};st=[];on=set();out=[];i=[0]
    sys.setrecursionlimit(100000)
    nodes=set(G)|{x for v in G.values() for x in v}
    def sc(v):
        idx[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
        for w in G.get(v,()):
            if w not in idx: sc(w);low[v]=min(low[v],low[w])
            elif w in on: low[v]=min(low[v],idx[w])
        if low[v]==idx[v]:
            c=[]
            while True:
                w=st.pop();on.discard(w);c.append(w)
                if w==v:break
            if len(c)>1: out.append(c)
    for v in sorted(nodes):
        if v not in idx: sc(v)
    return out
print('module cycles:',sccs(G))
print('folder cycles:',sccs(F))
for k in sorted(F): print(k,'->',sorted(F[k]))
