//! What the runner plays of a cluster's control plane for workload
//! identity: the service-account issuer (an HTTPS API server serving its
//! keys at /openid/v1/jwks to callers with a token, under the cluster's CA),
//! the projected tokens the kubelet mints for each pod, and the
//! `kube-root-ca.crt` ConfigMap every namespace holds.

use crate::TempDir;
use serde_json::json;
use std::time::Duration;
use toolmesh_testkit::oidc::{ApiServer, Provider, SigningKey};

/// The API server's own audience: a projected token without `audience`.
const API_TOKEN: &str = "api-server-audience-token";

/// The cluster's issuer, running.
pub struct ControlPlane {
    /// Its issuer URL (`https://127.0.0.1:PORT`), as its tokens' `iss`.
    pub issuer: String,
    /// The cluster's CA (PEM), which `kube-root-ca.crt` holds.
    pub ca_pem: String,
    key: SigningKey,
    _provider: Provider,
    _dir: TempDir,
}

impl ControlPlane {
    /// Starts the API server's issuer endpoints on 127.0.0.1.
    pub async fn start() -> ControlPlane {
        let dir = TempDir::new("control-plane").expect("a directory for the cluster CA");
        let (ca, cert, key_pem) = toolmesh_testkit::pki(&dir, "kube-apiserver");
        let key = SigningKey::rs256("cluster-sa-1");
        let provider = Provider::start_api_server(
            &[&key],
            ApiServer {
                cert: &cert,
                key: &key_pem,
                bearer: API_TOKEN,
            },
        )
        .await;
        ControlPlane {
            issuer: provider.issuer.clone(),
            ca_pem: std::fs::read_to_string(ca).expect("the cluster CA"),
            key,
            _provider: provider,
            _dir: dir,
        }
    }

    /// The kubelet's token for `account` of `namespace`: for `audience`, or
    /// (none) for the API server itself.
    pub fn projected_token(
        &self,
        namespace: &str,
        account: &str,
        audience: Option<&str>,
        ttl: Duration,
    ) -> String {
        let Some(audience) = audience else {
            return API_TOKEN.to_owned();
        };
        let now = toolmesh_testkit::oidc::now();
        self.key.mint(&json!({
            "iss": self.issuer,
            "aud": [audience],
            "sub": format!("system:serviceaccount:{namespace}:{account}"),
            "iat": now,
            "nbf": now,
            "exp": now + ttl.as_secs(),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": account}},
        }))
    }
}
