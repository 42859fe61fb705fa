#[tokio::main]
async fn main() {
    let tune = std::env::args().any(|a| a == "tune");
    let r = toolmesh_bench::run_search(toolmesh_bench::SearchOptions {
        quick: true,
        eval: Some(toolmesh_bench::EvalOptions {
            data: "target/bfcl/unpacked/bfcl_eval/data".into(),
            python: "target/venv-bfcl/bin/python".into(),
            held_out: false,
            tune,
        }),
        json: None,
    })
    .await
    .unwrap();
    println!("{r}");
}
