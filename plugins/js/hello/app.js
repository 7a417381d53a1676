// An example cronrun job in JavaScript, built with componentize-js against wit/job.wit.
//
// `cronrun manifest` gives the built component its schedule; `wasm.config` picks what a
// run does: `greeting` (the default) logs a line and returns a result; `spin` loops until
// the run's deadline stops it; `grow` allocates past the memory limit. A thrown error
// fails the run with its message.
import { get } from 'cronrun:job/config@0.1.0';
import { write } from 'cronrun:job/log@0.1.0';

export function run(ctx) {
  const mode = get('mode') ?? 'greeting';
  if (mode === 'spin') {
    for (;;) {}
  }
  if (mode === 'grow') {
    const hoard = [];
    for (;;) {
      hoard.push(new Uint8Array(8 << 20).fill(1));
    }
  }
  const greeting = get('greeting') ?? 'hello';
  write('info', `${greeting} from javascript: ${ctx.job} run ${ctx.runId} (${ctx.trigger})`);
  return `javascript ran attempt ${ctx.attempt}`;
}
