"""Design-space exploration: ``bitforge sweep SPEC -o OUT`` (docs/sweep.md).

``model`` (the types every module exchanges) -> ``spec`` (parse and check a spec file) -> ``sampling`` (grid,
random, Latin hypercube) -> ``runners`` (one point through the existing commands' library functions) ->
``executors`` (serial, process pool, Ray) -> ``driver`` (cache, resume, early stop, progress) -> ``pareto`` and
``report`` (sweep.json, pareto.png, report.html). ``llm_search`` is the LLM side's joint bit-width and rank search.
"""
