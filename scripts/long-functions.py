#!/usr/bin/env python3
"""Lists library/CLI source files over 600 lines before their tests and functions over 80 lines.

    scripts/long-functions.py crates/extalloc/src crates/extalloc-cli/src

Prints nothing when every file and function is within bounds (the layering rule of
docs/architecture.md). A heuristic: it finds `fn` items by indentation, so it reads code
formatted by rustfmt."""
import re,sys,os
for root in sys.argv[1:]:
  for dp,dn,fn in os.walk(root):
    for f in fn:
      if not f.endswith('.rs'): continue
      p=os.path.join(dp,f); lines=open(p).read().split('\n')
      # non-test length
      end=len(lines)
      for i,l in enumerate(lines):
        if l.startswith('#[cfg(test)]'): end=i;break
      if end>600: print(f"FILE {p}: {end} lines before tests")
      i=0
      while i<end:
        m=re.match(r'^(\s*)(pub(\([a-z]+\))? )?(const )?(unsafe )?fn (\w+)',lines[i])
        if m:
          ind=m.group(1); j=i
          while j<end and not lines[j].rstrip().endswith('{') : j+=1
          k=j+1
          while k<end and not (lines[k].startswith(ind+'}') and len(lines[k].rstrip())==len(ind)+1): k+=1
          if k-i+1>80: print(f"FN {p}:{i+1} {m.group(6)} {k-i+1}")
          i=k
        i+=1
