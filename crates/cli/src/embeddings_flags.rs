//! The `--search-embeddings-*` flags: the OpenAI-compatible embeddings
//! endpoint that adds semantic ranking to tool search; its key only from
//! the environment, never the command line.

use std::time::Duration;

/// Semantic ranking of tool search (SearchTools, `search_tools`, the MCP
/// door's search mode).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Semantic tool search options")]
pub(crate) struct EmbeddingsFlags {
    /// Rank tool search semantically too, with the OpenAI-compatible
    /// embeddings endpoint at this base URL (`POST URL/v1/embeddings`:
    /// vLLM, TEI, Ollama, a vendor), fused with the lexical ranking. When
    /// it is slow or down, search answers lexically.
    #[arg(
        long,
        env = "TOOLMESH_SEARCH_EMBEDDINGS_URL",
        requires = "search_embeddings_model",
        value_name = "URL"
    )]
    pub(crate) search_embeddings_url: Option<String>,
    /// The model every embeddings request names.
    #[arg(long, env = "TOOLMESH_SEARCH_EMBEDDINGS_MODEL", value_name = "NAME")]
    pub(crate) search_embeddings_model: Option<String>,
    /// The environment variable holding the endpoint's key, sent as a
    /// bearer token.
    #[arg(long, value_name = "VAR", value_parser = key_from_env)]
    pub(crate) search_embeddings_key_env: Option<KeyFromEnv>,
    /// Longest a search waits for its query's embedding, in milliseconds
    /// (at most half of what the call has left).
    #[arg(long, default_value_t = toolmesh_dispatcher::EMBEDDINGS_WAIT.as_millis() as u64, value_name = "MS")]
    pub(crate) search_embeddings_wait_ms: u64,
}

/// A key read from the environment variable a flag names.
#[derive(Clone)]
pub(crate) struct KeyFromEnv(String);

impl std::fmt::Debug for KeyFromEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyFromEnv(..)")
    }
}

/// `--search-embeddings-key-env`: the key in the variable it names.
fn key_from_env(name: &str) -> Result<KeyFromEnv, String> {
    match std::env::var(name) {
        Ok(key) if !key.is_empty() => Ok(KeyFromEnv(key)),
        _ => Err(format!("the environment variable {name} is not set")),
    }
}

impl EmbeddingsFlags {
    /// The dispatcher's embeddings settings, when a URL is given.
    pub(crate) fn setting(&self) -> Option<toolmesh_dispatcher::EmbeddingsConfig> {
        let url = self.search_embeddings_url.clone()?;
        let model = self.search_embeddings_model.clone().unwrap_or_default();
        Some(toolmesh_dispatcher::EmbeddingsConfig {
            api_key: self.search_embeddings_key_env.clone().map(|key| key.0),
            wait: Duration::from_millis(self.search_embeddings_wait_ms),
            ..toolmesh_dispatcher::EmbeddingsConfig::new(url, model)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::args::{Cli, Command};
    use clap::{CommandFactory, FromArgMatches};

    fn parsed(line: &[&str]) -> Result<Cli, clap::Error> {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("toolmesh").chain(line.iter().copied()))?;
        Cli::from_arg_matches(&matches)
    }

    /// No URL, no semantic ranking; a URL needs a model; the key comes
    /// from the variable named, and a variable not set is refused.
    #[test]
    fn embeddings_flags() {
        let setting = |line: &[&str]| match parsed(line).unwrap().command {
            Command::Serve(args) => args.server.search_embeddings.setting(),
            Command::Dispatcher(args) => args.server.search_embeddings.setting(),
            other => panic!("{other:?}"),
        };
        assert!(setting(&["serve"]).is_none());
        let url = ["--search-embeddings-url", "http://127.0.0.1:8080"];
        assert!(
            parsed(&[&["serve"][..], &url].concat()).is_err(),
            "a model is required"
        );
        let model = ["--search-embeddings-model", "bge-small"];
        let line = [
            &["dispatcher", "--registry", "127.0.0.1:7070"][..],
            &url,
            &model,
        ]
        .concat();
        let config = setting(&line).expect("semantic ranking");
        assert_eq!(
            (config.url.as_str(), config.model.as_str(), config.api_key),
            ("http://127.0.0.1:8080", "bge-small", None)
        );
        assert_eq!(config.wait, toolmesh_dispatcher::EMBEDDINGS_WAIT);
        let key = ["--search-embeddings-key-env", "PATH"];
        let config = setting(&[&["serve"][..], &url, &model, &key].concat()).unwrap();
        assert_eq!(config.api_key, std::env::var("PATH").ok());
        let unset = [
            "--search-embeddings-key-env",
            "TOOLMESH_TEST_NO_SUCH_VARIABLE",
        ];
        let refused = parsed(&[&["serve"][..], &url, &model, &unset].concat()).unwrap_err();
        assert!(refused.to_string().contains("is not set"), "{refused}");
    }
}
