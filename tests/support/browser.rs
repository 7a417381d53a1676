//! A real headless Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` (`deploy/dev-deps.sh` installs them), chromedriver a child process
//! killed with the test.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

use super::{eventually, free_port};

pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    pub async fn start() -> Browser {
        let port = free_port();
        // In a process group of its own, so that Chromium dies with it.
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver must be installed: deploy/dev-deps.sh (apt-get install chromium chromium-driver)");
        eventually(Duration::from_secs(20), "chromedriver to listen", || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(|_| ())
        })
        .await;
        // As root Chromium needs --no-sandbox; /dev/shm is small in containers.
        let mut args = vec!["--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800"];
        if nix::unistd::geteuid().is_root() {
            args.push("--no-sandbox");
        }
        let mut options = serde_json::json!({ "args": args });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = "/usr/bin/chromium".into();
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Browser { client, driver }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The text of the first element matching `css`, once there is one. Found and read
    /// again if the page replaced the element between the two (a stale element).
    pub async fn text(&self, css: &str) -> String {
        self.text_until(css, &format!("{css} on the page"), |_| true).await
    }

    /// Waits until the text of `css` passes `check`; returns it.
    pub async fn text_until(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        eventually(Duration::from_secs(20), what, || async {
            let element = self.client.find(Locator::Css(css)).await.ok()?;
            element.text().await.ok().filter(|t| check(t))
        })
        .await
    }

    /// Clicks the first element matching `css`, once there is one; a click on an element
    /// the page has just replaced fails without effect, so it is found again.
    pub async fn click(&self, css: &str) {
        eventually(Duration::from_secs(20), &format!("{css} to click"), || async {
            self.client.find(Locator::Css(css)).await.ok()?.click().await.ok()
        })
        .await
    }

    /// Whether an element matches `css` now.
    pub async fn has(&self, css: &str) -> bool {
        self.client.find(Locator::Css(css)).await.is_ok()
    }

    /// Saves the page as PNG into `$CRONRUN_SCREENSHOTS/<name>.png` when that is set (how
    /// the README's screenshots are made).
    pub async fn screenshot(&self, name: &str) {
        if let Some(dir) = std::env::var_os("CRONRUN_SCREENSHOTS") {
            let png = self.client.screenshot().await.unwrap();
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}
