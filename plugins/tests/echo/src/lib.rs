//! `test-echo`: runs per message on `echo.in` and after each run of `echo-upstream`,
//! both set in the attribute, and returns its input as its output. For the host's tests.
//! `overlap = "queue"`: a message run and a chained run that meet both run.

use cronrun_sdk::Context;

#[cronrun_sdk::job(
    on(subject = "echo.in", redeliver = 1),
    after(job = "echo-upstream", on = "finished"),
    overlap = "queue",
    timeout = "5s"
)]
fn run(ctx: &Context) -> Result<Option<String>, String> {
    Ok(ctx.input())
}
