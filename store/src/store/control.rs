//! Control requests (`cronrun.ctl.>`), answered on a control answer subject rather than
//! an inbox: runners may publish there, so they need no `allow_responses`, the right to
//! answer any reply subject a message carries (docs/security.md, "Reply subjects").

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::Store;
use crate::error::Error;

impl Store {
    /// Publishes `payload` to `subject` asking for an answer on a fresh control answer
    /// subject. Some(answer): one came within `within`; None: none did.
    pub async fn ask_control(&self, subject: String, payload: Bytes, within: Duration) -> Result<Option<Bytes>, Error> {
        let token = format!("{:032x}", rand::random::<u128>());
        let answer = self.names.control_answer_subject(&token);
        let mut answers =
            self.client.subscribe(answer.clone()).await.map_err(|e| Error::nats("subscribing to the answer", e))?;
        let asked = async {
            self.client
                .publish_with_reply(subject, answer, payload)
                .await
                .map_err(|e| Error::nats("sending a control request", e))?;
            Ok::<_, Error>(answers.next().await.map(|m| m.payload))
        };
        let answered = tokio::time::timeout(within, asked).await;
        let _ = answers.unsubscribe().await;
        match answered {
            Ok(answer) => answer,
            Err(_) => Ok(None),
        }
    }
}
