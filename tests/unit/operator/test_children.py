"""The children's manifests: names, labels, selectors, security and what the worker is told."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from crawlfleet.config import DrainConfig, OperatorConfig
from crawlfleet.crawljob import CrawlJobSpec, parse_crawljob
from crawlfleet.operator import children
from crawlfleet.operator.children import JobRef, child_name

JOB = JobRef(namespace="crawls", name="books")
DRAIN = DrainConfig()
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def spec(**overrides: object) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping({"seeds": ["https://books.example/"], **overrides})


def test_child_names_are_fixed_and_valid_service_names() -> None:
    names = JOB.names
    assert (names.redis, names.workers, names.config) == (
        "books-redis",
        "books-workers",
        "books-config",
    )
    long_name = "a" * 120 + ".b" * 60
    for suffix in ("redis", "workers", "redis-auth"):
        name = child_name(long_name, suffix)
        assert len(name) <= 63
        assert DNS_1035.match(name), name
        assert name.endswith(f"-{suffix}")
    # Two long names that share a 50-character prefix still get different children.
    assert child_name("x" * 80 + "1", "redis") != child_name("x" * 80 + "2", "redis")
    assert child_name("9lives", "redis") == "cj-9lives-redis"


def test_selector_matches_the_pod_template_and_the_status_string() -> None:
    deployment = children.worker_deployment(
        JOB, spec(), replicas=0, image="crawlfleet/worker:x", drain=DRAIN
    )
    selector = deployment["spec"]["selector"]["matchLabels"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    assert children.selector_string(selector) == (
        "app.kubernetes.io/component=worker,crawlfleet.io/job=books"
    )
    redis = children.redis_deployment(JOB, spec())
    redis_selector = redis["spec"]["selector"]["matchLabels"]
    # The two Deployments must never select each other's pods.
    assert not redis_selector.items() <= template_labels.items()


def test_worker_pod_is_locked_down() -> None:
    pod = children.worker_deployment(JOB, spec(), replicas=2, image="img", drain=DRAIN)["spec"][
        "template"
    ]
    pod_spec = pod["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod_spec["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # Every path the worker writes is a volume: the root filesystem is read-only.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/data", "/tmp", "/etc/crawlfleet"} <= mounts
    # The pod outlives the worker's whole drain: fetches, loops and the last flush.
    grace = pod_spec["terminationGracePeriodSeconds"]
    assert grace == DRAIN.budget_seconds
    assert grace >= DRAIN.grace_seconds + DRAIN.settle_seconds + DRAIN.exit_seconds
    assert container["args"][container["args"].index("--grace-seconds") + 1] == "25"


def test_a_worker_that_does_not_answer_at_all_is_killed_without_its_drain_budget() -> None:
    """Liveness is the /metrics thread answering (tests/e2e/test_real_node.py stops a worker
    for real): a hung process cannot drain, so the kubelet's kill does not wait for one."""
    pod_spec = children.worker_deployment(JOB, spec(), replicas=1, image="img", drain=DRAIN)[
        "spec"
    ]["template"]["spec"]
    (container,) = pod_spec["containers"]
    liveness = container["livenessProbe"]
    assert liveness["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert liveness["timeoutSeconds"] < liveness["periodSeconds"]
    assert liveness["terminationGracePeriodSeconds"] < pod_spec["terminationGracePeriodSeconds"]


def test_worker_env_has_no_secret_and_names_the_pod() -> None:
    container = children.worker_deployment(JOB, spec(), replicas=0, image="img", drain=DRAIN)[
        "spec"
    ]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["CRAWLFLEET_WORKER_ID"]["value"] == "$(POD_NAME)"
    # The URL, password included, comes from the Secret: nothing of it is in the pod spec.
    assert env["CRAWLFLEET_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "books-redis-auth",
        "key": "url",
    }
    order = [e["name"] for e in container["env"]]
    # $(VAR) references resolve only to variables defined earlier in the list.
    assert order.index("POD_NAME") < order.index("CRAWLFLEET_WORKER_ID")
    assert "--keep-running" in container["args"]


@pytest.mark.parametrize(
    ("redis", "expected"),
    [
        ({"url": "redis://:pw@redis.example:6379/0"}, {"name": "books-redis-auth", "key": "url"}),
        (
            {"secretRef": {"name": "shared-redis", "key": "uri"}},
            {"name": "shared-redis", "key": "uri"},
        ),
    ],
)
def test_external_redis_url_comes_from_a_secret(redis: dict[str, object], expected: object) -> None:
    container = children.worker_deployment(
        JOB, spec(redis=redis), replicas=0, image="img", drain=DRAIN
    )["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["CRAWLFLEET_REDIS_URL"]["valueFrom"]["secretKeyRef"] == expected
    assert "REDIS_PASSWORD" not in env
    assert "pw@" not in yaml.safe_dump(container)


def test_the_proxy_list_reaches_the_workers_from_its_secret_alone() -> None:
    job_spec = spec(proxy={"secretRef": {"name": "crawl-proxies"}, "noProxy": ["corp.example"]})
    container = children.worker_deployment(JOB, job_spec, replicas=0, image="img", drain=DRAIN)[
        "spec"
    ]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["CRAWLFLEET_PROXIES"]["valueFrom"]["secretKeyRef"] == {
        "name": "crawl-proxies",
        "key": "proxies",
    }
    job = parse_crawljob(yaml.safe_load(children.config_map(JOB, job_spec)["data"]["job.yaml"]))
    assert job.spec.proxy == job_spec.proxy  # the workers read the same section
    without = children.worker_deployment(JOB, spec(), replicas=0, image="img", drain=DRAIN)
    assert "CRAWLFLEET_PROXIES" not in yaml.safe_dump(without)


def test_the_config_map_never_holds_the_redis_url() -> None:
    job_spec = spec(redis={"url": "redis://:hunter2@redis.example:6379/0"})
    data = children.config_map(JOB, job_spec)["data"]["job.yaml"]
    assert "hunter2" not in data
    job = parse_crawljob(yaml.safe_load(data))
    assert job.spec.redis.url is None
    assert job.spec.redis.secret_ref is not None
    assert (job.spec.redis.secret_ref.name, job.spec.redis.secret_ref.key) == (
        "books-redis-auth",
        "url",
    )
    assert job.spec.model_copy(update={"redis": job_spec.redis}) == job_spec


def test_config_map_holds_a_job_file_the_worker_accepts() -> None:
    job_spec = spec(scope={"maxDepth": 7}, concurrency={"perHost": 4})
    data = children.config_map(JOB, job_spec)["data"]["job.yaml"]
    job = parse_crawljob(yaml.safe_load(data))
    assert job.job_id == "crawls.books"
    assert job.spec == job_spec  # every default filled, nothing lost


def template_hash(job_spec: CrawlJobSpec) -> str:
    deployment = children.worker_deployment(JOB, job_spec, replicas=0, image="img", drain=DRAIN)
    return str(
        deployment["spec"]["template"]["metadata"]["annotations"][children.ANNOTATION_SPEC_HASH]
    )


def test_spec_change_rolls_the_workers() -> None:
    assert template_hash(spec()) == template_hash(spec())
    assert template_hash(spec()) != template_hash(spec(concurrency={"perHost": 5}))


def test_seeds_added_on_the_jobs_hosts_do_not_roll_the_workers() -> None:
    seeds = ["https://books.example/"]
    more = [*seeds, "https://books.example/new"]
    assert template_hash(spec(seeds=seeds)) == template_hash(spec(seeds=more))
    # A seed on a new host widens the default scope (the seed hosts): the workers need it.
    other = [*seeds, "https://other.example/"]
    assert template_hash(spec(seeds=seeds)) != template_hash(spec(seeds=other))
    # The workers' job file holds the seeds as they are now (a restarted worker reads them).
    assert (
        "https://books.example/new"
        in children.config_map(JOB, spec(seeds=more))["data"]["job.yaml"]
    )


def test_the_managed_redis_secret_holds_the_password_its_config_line_and_the_url() -> None:
    data = children.redis_secret(JOB, "s3cret")["stringData"]
    assert data == {
        "password": "s3cret",
        "auth.conf": "requirepass s3cret\n",
        "url": "redis://:s3cret@books-redis.crawls.svc:6379/0",
    }


def _redis_container(job_spec: CrawlJobSpec) -> dict[str, Any]:
    pod = children.redis_deployment(JOB, job_spec)["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


def test_redis_keeps_its_aof_on_the_jobs_claim_by_default() -> None:
    job_spec = spec()
    deployment = children.redis_deployment(JOB, job_spec)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = _redis_container(job_spec)["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "everysec"
    pvc = children.redis_pvc(JOB, job_spec)
    assert pvc is not None
    assert pvc["metadata"]["name"] == "books-redis-data"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    claim = {"claimName": "books-redis-data"}
    assert volumes[0] == {"name": "data", "persistentVolumeClaim": claim}
    ephemeral = spec(redis={"managed": {"persistence": {"enabled": False}}})
    assert children.redis_pvc(JOB, ephemeral) is None
    volumes = children.redis_deployment(JOB, ephemeral)["spec"]["template"]["spec"]["volumes"]
    assert volumes[0] == {"name": "data", "emptyDir": {}}


def test_redis_memory_has_a_limit_and_maxmemory_below_it_without_eviction() -> None:
    job_spec = spec(redis={"managed": {"memoryRequest": "512Mi", "memoryLimit": "2Gi"}})
    container = _redis_container(job_spec)
    assert container["resources"]["requests"]["memory"] == "512Mi"
    assert container["resources"]["limits"] == {"memory": "2Gi"}
    args = container["args"]
    assert int(args[args.index("--maxmemory") + 1]) == int(2 * 1024**3 * 0.8)
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    default = _redis_container(spec())
    assert default["resources"]["limits"] == {"memory": "1Gi"}


def test_redis_reads_its_password_from_the_mounted_secret_never_from_argv() -> None:
    container = _redis_container(spec())
    assert "--requirepass" not in container["args"]
    assert container["args"][:2] == ["--include", "/etc/redis-auth/auth.conf"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["auth"] == {"name": "auth", "mountPath": "/etc/redis-auth", "readOnly": True}
    volumes = children.redis_deployment(JOB, spec())["spec"]["template"]["spec"]["volumes"]
    auth = next(v for v in volumes if v["name"] == "auth")
    assert auth["secret"]["secretName"] == "books-redis-auth"
    assert auth["secret"]["items"] == [{"key": "auth.conf", "path": "auth.conf"}]
    # The readiness probe authenticates, with the password from the environment.
    env = {e["name"]: e for e in container["env"]}
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == {
        "name": "books-redis-auth",
        "key": "password",
    }
    command = " ".join(container["readinessProbe"]["exec"]["command"])
    assert "redis-cli" in command
    assert "PONG" in command
    assert "-a" not in command.split()


def test_network_policy_admits_only_the_jobs_workers_and_the_operator() -> None:
    operator = dict(OperatorConfig().operator_labels)
    policy = children.network_policy(JOB, operator, "crawlfleet-system")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "crawlfleet.io/job": "books",
        "app.kubernetes.io/component": "redis",
    }
    sources = policy["spec"]["ingress"][0]["from"]
    assert sources[0] == {"podSelector": {"matchLabels": children.worker_selector(JOB)}}
    # The operator by its namespace's name (set by the API server) AND its labels, in one
    # peer: labels alone would admit any pod in any namespace that copies them.
    assert sources[1] == {
        "podSelector": {"matchLabels": operator},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "crawlfleet-system"}},
    }
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 6379}]
    # An operator outside the cluster is no pod: only the workers are admitted.
    alone = children.network_policy(JOB, operator, None)["spec"]["ingress"][0]["from"]
    assert alone == [sources[0]]


def _egress(policy: dict[str, Any]) -> list[dict[str, Any]]:
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["podSelector"] == {"matchLabels": children.worker_selector(JOB)}
    rules: list[dict[str, Any]] = policy["spec"]["egress"]
    return rules


ANYWHERE = [
    {"namespaceSelector": {}},
    {"ipBlock": {"cidr": "0.0.0.0/0"}},
    {"ipBlock": {"cidr": "::/0"}},
]


def test_worker_egress_keeps_a_public_crawl_out_of_the_cluster() -> None:
    policy = children.worker_egress_policy(JOB, spec(), ("203.0.113.0/24", "2001:db8::/48"))
    assert policy["metadata"]["name"] == "books-worker-egress"
    web, dns, redis = _egress(policy)
    v4, v6 = web["to"]
    assert "ports" not in web  # the web on every port
    assert v4["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} <= set(
        v4["ipBlock"]["except"]
    )
    assert {"203.0.113.0/24", "169.254.169.254/32", "168.63.129.16/32"} <= set(
        v4["ipBlock"]["except"]
    )
    assert {"2001:db8::/48", "fc00::/7", "fd00:ec2::254/128"} <= set(v6["ipBlock"]["except"])
    assert dns == {
        "to": ANYWHERE,
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    assert redis == {
        "to": [{"podSelector": {"matchLabels": {"crawlfleet.io/job": "books",
                                                "app.kubernetes.io/component": "redis"}}}],
        "ports": [{"protocol": "TCP", "port": 6379}],
    }  # fmt: skip


def test_worker_egress_of_a_private_crawl_refuses_only_the_metadata_addresses() -> None:
    private = spec(scope={"allowPrivateNetworks": True})
    web, *_ = _egress(children.worker_egress_policy(JOB, private, ("203.0.113.0/24",)))
    v4, v6 = web["to"]
    assert sorted(v4["ipBlock"]["except"]) == sorted(
        ["100.100.100.200/32", "168.63.129.16/32", "169.254.169.254/32", "169.254.170.2/32",
         "192.0.0.192/32"]
    )  # fmt: skip
    assert v6["ipBlock"]["except"] == ["fd00:ec2::254/128"]


def test_worker_egress_admits_an_external_redis_and_the_output_store_by_port() -> None:
    external = spec(
        redis={"url": "redis://redis.shared.svc:6380/0"},
        output={"destination": "s3://crawls/p/", "s3": {"endpoint": "http://store.cf.svc:7070"}},
    )
    _, _, redis, store = _egress(children.worker_egress_policy(JOB, external, ()))
    assert redis == {"to": ANYWHERE, "ports": [{"protocol": "TCP", "port": 6380}]}
    assert store == {"to": ANYWHERE, "ports": [{"protocol": "TCP", "port": 7070}]}
    in_secret = spec(
        redis={"secretRef": {"name": "r"}},
        output={"destination": "s3://crawls/p/", "s3": {"endpoint": "https://s3.example"}},
    )
    _, _, redis, store = _egress(children.worker_egress_policy(JOB, in_secret, ()))
    assert redis["ports"] == [{"protocol": "TCP", "port": 6379}]
    assert store["ports"] == [{"protocol": "TCP", "port": 443}]


def test_workers_are_told_to_be_a_new_worker_after_each_restart() -> None:
    container = children.worker_deployment(JOB, spec(), replicas=0, image="img", drain=DRAIN)[
        "spec"
    ]["template"]["spec"]["containers"][0]
    assert "--incarnation" in container["args"]


def test_a_worker_that_must_stop_says_why_in_its_pod_status() -> None:
    container = children.worker_deployment(JOB, spec(), replicas=0, image="img", drain=DRAIN)[
        "spec"
    ]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--termination-log") + 1] == children.TERMINATION_LOG
    assert container["terminationMessagePath"] == children.TERMINATION_LOG
    # A worker that dies without writing it (a traceback) leaves its log's tail instead.
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_worker_egress_admits_private_proxies_by_port_only_when_allowed() -> None:
    public = spec(proxy={"urls": ["http://proxy.corp.example:3128"]})
    assert "3128" not in str(children.worker_egress_policy(JOB, public, ("10.96.0.0/12",)))
    private = spec(proxy={"urls": ["http://proxy.corp.example:3128"], "allowPrivate": True})
    rules = children.worker_egress_policy(JOB, private, ("10.96.0.0/12",), (1080, 3128))["spec"][
        "egress"
    ]
    ports = [rule["ports"] for rule in rules if "ports" in rule]
    assert [{"protocol": "TCP", "port": 1080}, {"protocol": "TCP", "port": 3128}] in ports
