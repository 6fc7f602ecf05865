"""The settings of S3 disks and leases (webfs.backends.options.BackendOptions):
read from a given environment mapping once, mount options on top, bad values
refused with a line naming the variable or option; and what the S3 client is
given instead of environment variables."""
from __future__ import annotations

import pytest

from webfs.backends.options import DEFAULT_CACHE, DEFAULT_LEASE_RENEW, DEFAULT_REQUESTS, BackendOptions
from webfs.backends.s3 import DiskURL, state_dir
from webfs.backends.s3client import ObjectClient

URL = DiskURL.parse("s3+http://127.0.0.1:1/bucket/pre/fix")


def test_nothing_set_is_the_defaults():
    options = BackendOptions.from_env({"HOME": "/home/u"})
    assert options.s3_credentials is None and options.state_dir is None
    assert (options.block_cache, options.s3_requests) == (DEFAULT_CACHE, DEFAULT_REQUESTS)
    assert options.region == "us-east-1" and not options.ec2_metadata
    assert options.lease_renew == DEFAULT_LEASE_RENEW and not options.take_lease


def test_every_variable_is_read_from_the_mapping_given():
    options = BackendOptions.from_env({
        "WEBFS_S3_CREDENTIALS": "creds", "WEBFS_STATE_DIR": "/st", "WEBFS_BLOCK_CACHE": "0",
        "WEBFS_S3_REQUESTS": "4", "WEBFS_S3_STAGING": "1024", "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_EC2_METADATA_DISABLED": "false", "WEBFS_LEASE_RENEW": "0.01", "WEBFS_TAKE_LEASE": "1"})
    assert options.s3_credentials.endswith("/creds") and options.s3_credentials.startswith("/")
    assert (options.state_dir, options.block_cache, options.s3_requests, options.s3_staging) == ("/st", 0, 4, 1024)
    assert options.region == "eu-west-1" and options.ec2_metadata and options.take_lease
    assert options.lease_renew == 0.1           # never below a tenth of a second
    assert BackendOptions.from_env({"AWS_REGION": "a", "AWS_DEFAULT_REGION": "b"}).region == "a"
    assert not BackendOptions.from_env({"WEBFS_TAKE_LEASE": "0"}).take_lease


def test_the_state_directory_follows_the_options():
    assert state_dir(URL, BackendOptions(state_dir="/st")) == "/st/s3/127.0.0.1_1/bucket/pre%2Ffix"
    xdg = BackendOptions.from_env({"XDG_CACHE_HOME": "/cache"})
    assert state_dir(URL, xdg).startswith("/cache/webfs/s3/")


def test_mount_options_go_on_top_and_leave_the_first_alone():
    first = BackendOptions.from_env({"WEBFS_S3_REQUESTS": "4", "WEBFS_STATE_DIR": "/a"})
    mounted = first.with_settings({"state_dir": "/b", "block_cache": "7"}).taking_lease()
    assert (mounted.state_dir, mounted.block_cache, mounted.s3_requests, mounted.take_lease) == ("/b", 7, 4, True)
    assert (first.state_dir, first.block_cache, first.take_lease) == ("/a", DEFAULT_CACHE, False)


@pytest.mark.parametrize("env, said", [
    ({"WEBFS_S3_REQUESTS": "0"}, "WEBFS_S3_REQUESTS takes a whole number above 0, not '0'"),
    ({"WEBFS_BLOCK_CACHE": "64M"}, "WEBFS_BLOCK_CACHE takes a whole number, not '64M'"),
    ({"WEBFS_LEASE_RENEW": "soon"}, "WEBFS_LEASE_RENEW='soon': not a number of seconds"),
])
def test_a_bad_variable_is_refused_by_name(env, said):
    with pytest.raises(ValueError) as refused:
        BackendOptions.from_env(env)
    assert str(refused.value) == said


def test_a_bad_mount_option_is_refused_by_name():
    with pytest.raises(ValueError, match="s3_staging takes a whole number, not '-1'"):
        BackendOptions().with_settings({"s3_staging": "-1"})
    with pytest.raises(ValueError, match="not a setting of S3 disks"):
        BackendOptions().with_settings({"sync": "1"})


def test_the_instance_metadata_is_asked_only_when_allowed():
    """No credentials must not mean a probe of the EC2 metadata address (a
    second's wait, traffic off this machine): its provider is left out of
    the chain the client is given, not switched off in the environment."""
    def providers(ec2_metadata: bool) -> list[str]:
        client = ObjectClient(URL, {}, 1, "us-east-1", ec2_metadata=ec2_metadata)
        chain = client._session()._session.get_component("credential_provider")
        return [p.METHOD for p in chain.providers]
    assert "iam-role" not in providers(False) and "env" in providers(False)
    assert "iam-role" in providers(True)
