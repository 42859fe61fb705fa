//! Setting up etcd's authentication (what `etcdctl user add`, `role add`,
//! `role grant-permission --prefix`, `user grant-role` and `auth enable`
//! do): for tests and for bootstrapping a cluster.

use crate::auth::Call;
use crate::client::Client;
use crate::error::EtcdError;
use crate::pb::{self, auth_client::AuthClient, authpb};

impl Client {
    /// Adds `user` with `password`, and a role of the same name allowed to
    /// read and write every key under `prefix`, granted to it.
    pub async fn add_user_for_prefix(
        &self,
        user: &str,
        password: &str,
        prefix: &[u8],
    ) -> Result<(), EtcdError> {
        self.add_user(user, password).await?;
        let role = pb::AuthRoleAddRequest {
            name: user.to_owned(),
        };
        self.with_failover(|call| {
            let request = call.request(role.clone());
            async move { auth(&call).role_add(request).await.map(drop) }
        })
        .await?;
        let grant = pb::AuthRoleGrantPermissionRequest {
            name: user.to_owned(),
            perm: Some(authpb::Permission {
                perm_type: authpb::permission::Type::Readwrite.into(),
                key: prefix.to_vec(),
                range_end: crate::prefix_end(prefix),
            }),
        };
        self.with_failover(|call| {
            let request = call.request(grant.clone());
            async move { auth(&call).role_grant_permission(request).await.map(drop) }
        })
        .await?;
        self.grant_role(user, user).await
    }

    /// Adds the `root` user with `root_password` and turns authentication
    /// on: from then on every request needs a user's token.
    pub async fn enable_auth(&self, root_password: &str) -> Result<(), EtcdError> {
        self.add_user("root", root_password).await?;
        self.grant_role("root", "root").await?;
        self.with_failover(|call| {
            let request = call.request(pb::AuthEnableRequest {});
            async move { auth(&call).auth_enable(request).await.map(drop) }
        })
        .await
    }

    async fn add_user(&self, user: &str, password: &str) -> Result<(), EtcdError> {
        let add = pb::AuthUserAddRequest {
            name: user.to_owned(),
            password: password.to_owned(),
        };
        self.with_failover(|call| {
            let request = call.request(add.clone());
            async move { auth(&call).user_add(request).await.map(drop) }
        })
        .await
    }

    async fn grant_role(&self, user: &str, role: &str) -> Result<(), EtcdError> {
        let grant = pb::AuthUserGrantRoleRequest {
            user: user.to_owned(),
            role: role.to_owned(),
        };
        self.with_failover(|call| {
            let request = call.request(grant.clone());
            async move { auth(&call).user_grant_role(request).await.map(drop) }
        })
        .await
    }
}

fn auth(call: &Call) -> AuthClient<tonic::transport::Channel> {
    AuthClient::new(call.channel.clone())
}
