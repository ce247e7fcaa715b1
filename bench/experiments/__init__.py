"""One-off experiments (issue 39, item 6): each answered a question once, and its result and
command stay in bench/results. They are kept runnable (`python -m bench.experiments.NAME`) but
are not the tool: nothing in bench/ outside this folder imports them."""
