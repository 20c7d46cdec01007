"""``spec.proxy`` on the real control plane: the proxy list lives in a labelled Secret, the
workers take it through a ``secretKeyRef``, every request the site sees came through the proxy
(tinyproxy with Basic authentication, tests/support/proxies.py), and the password is in no
ConfigMap, argv, Event, log line or status. A Secret whose list cannot be used is refused before
any child exists, with the field, the Secret, the line and no credentials."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    crawljob,
    get_job,
    install_crd,
    pod_argv,
    running_operator,
    wait_condition,
    wait_for_phase,
)
from tests.support.proxies import HttpProxy


def _proxy_secret(core: client.CoreV1Api, namespace: str, name: str, listed: str) -> None:
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name, labels={"crawlfleet.io/crawljob-secret": "true"}
            ),
            string_data={"proxies": listed},
        ),
    )


def test_a_job_crawls_through_the_proxies_of_its_secret_and_a_bad_list_is_refused(
    cluster: Cluster,
    kubelet: KubeletDouble,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    install_crd(cluster)
    with (
        TestSite(SiteConfig(hosts=2, pages_per_host=10, hostile=False)) as site,
        HttpProxy(tmp_path / "proxy") as proxy,
        running_operator(cluster, namespace, tmp_path) as operator,
    ):
        _proxy_secret(core, namespace, "crawl-proxies", f"# the exit\n{proxy.url}\n")
        _proxy_secret(core, namespace, "bad-proxies", f"ftp://crawler:{proxy.password}@x:21\n")
        proxied = {"secretRef": {"name": "crawl-proxies"}, "allowPrivate": True}
        apply(cluster, crawljob("proxied", site, proxy=proxied), namespace=namespace)
        bad = {"secretRef": {"name": "bad-proxies"}, "allowPrivate": True}
        apply(cluster, crawljob("refused", site, proxy=bad), namespace=namespace)

        refused = wait_condition(cluster, namespace, "refused", "InvalidSpec", timeout=60)
        assert refused["message"].startswith(
            "spec.proxy.secretRef: Secret bad-proxies, key proxies: line 1:"
        ), refused["message"]
        assert "unknown scheme 'ftp'" in refused["message"]
        assert proxy.password not in refused["message"]

        argv = wait_until(
            lambda: pod_argv(core, namespace) or None, timeout=60, what="a worker running"
        )
        job = wait_for_phase(
            cluster, namespace, "proxied", "Succeeded", timeout=150, operator=operator
        )
        assert job["status"]["crawled"] == len(site.expected_pages())
        seen = site.log.all_requests()
        assert {canonicalize(r.url) for r in seen if r.path != "/robots.txt"} == {
            canonicalize(url) for url in site.expected_pages()
        }
        assert all(HttpProxy.via_name in (r.via or "") for r in seen)  # none came direct
        assert sorted(proxy.requests()) == sorted(r.url for r in seen)

        places: dict[str, str] = {f"argv of {pod}": line for pod, line in argv.items()}
        for config_map in core.list_namespaced_config_map(namespace).items:
            for key, value in (config_map.data or {}).items():
                places[f"ConfigMap {config_map.metadata.name}/{key}"] = value
        for event in core.list_namespaced_event(namespace).items:
            places[f"Event {event.reason}"] = event.message or ""
        for pod in core.list_namespaced_pod(namespace).items:
            for container in pod.spec.containers:
                try:
                    places[f"log of {pod.metadata.name}"] = kubelet.logs(
                        namespace, pod.metadata.name, container.name
                    )
                except LookupError:
                    continue
        for name in ("proxied", "refused"):
            places[f"status of {name}"] = str(get_job(cluster, namespace, name).get("status"))
        places["operator log"] = operator.log_file.read_text(errors="replace")

    assert any(name.startswith("ConfigMap") for name in places)
    assert any(name.startswith("argv") for name in places)
    leaks = [where for where, text in places.items() if proxy.password in text]
    assert not leaks, leaks
