"""fedxab.security.provision: the key files of each scheme, found complete (and loading) or not,
and written all or nothing."""

from __future__ import annotations

import pytest

from fedxab.errors import FedxabError
from fedxab.security.provision import generate_key_files, key_file_paths, present_key_files


@pytest.mark.parametrize("scheme", ["ed25519", "hmac"])
def test_written_key_files_are_found_present_until_one_is_missing(tmp_path, scheme):
    assert present_key_files(scheme, 2, tmp_path) is None
    written = generate_key_files(scheme, 2, tmp_path)
    assert written == key_file_paths(scheme, 2, tmp_path)
    assert present_key_files(scheme, 2, tmp_path) == written
    written[-1].unlink()
    assert present_key_files(scheme, 2, tmp_path) is None


def test_the_files_of_each_scheme():
    names = [p.as_posix() for p in key_file_paths("ed25519", 1, "k")]
    assert names == ["k/private/server.key", "k/private/client-0.key",
                     "k/public/server.pub", "k/public/client-0.pub"]  # fmt: skip
    assert [p.as_posix() for p in key_file_paths("hmac", 2, "k")] == [
        "k/client-0.key",
        "k/client-1.key",
    ]


@pytest.mark.parametrize("scheme", ["ed25519", "hmac"])
def test_a_broken_key_file_is_an_error_not_a_present_key(tmp_path, scheme):
    written = generate_key_files(scheme, 1, tmp_path)
    written[0].write_text("not a key\n")
    with pytest.raises(FedxabError):
        present_key_files(scheme, 1, tmp_path)


@pytest.mark.parametrize("scheme", ["ed25519", "hmac"])
def test_existing_key_files_are_never_overwritten(tmp_path, scheme):
    generate_key_files(scheme, 1, tmp_path)
    with pytest.raises(FedxabError, match="already exists"):
        generate_key_files(scheme, 1, tmp_path)
