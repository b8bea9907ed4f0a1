"""The Python leg of the bindings' parity check (scripts/parity.sh), run with the installed
wheel: the greedy continuation of PROMPT, printed as the other legs print it (generated token
ids on the first line, the text after it).

usage: python scripts/parity.py MODEL PROMPT N
"""

import sys

import cera

model, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
engine = cera.Engine(model, n_threads=2)
s = engine.session(n_ctx=512)
text = s.generate(prompt, max_tokens=n, temperature=0)
generated = s.tokens[len(engine.tokenize(prompt)):]
sys.stdout.write(" ".join(map(str, generated)) + "\n" + text + "\n")
