"""An example cronrun job in Python, built with componentize-py against wit/job.wit.

`cronrun manifest` gives the built component its schedule; `wasm.config` picks what a run
does: `greeting` (the default) logs a line and returns a result; `spin` loops until the
run's deadline stops it; `grow` allocates past the memory limit.
"""

import wit_world
from wit_world.imports import config, log, types


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: types.JobContext):
        mode = config.get("mode") or "greeting"
        if mode == "spin":
            while True:
                pass
        if mode == "grow":
            hoard = []
            while True:
                hoard.append(bytearray(8 << 20))
        greeting = config.get("greeting") or "hello"
        log.write(types.Level.INFO, f"{greeting} from python: {ctx.job} run {ctx.run_id} ({ctx.trigger.name.lower()})")
        return f"python ran attempt {ctx.attempt}"
