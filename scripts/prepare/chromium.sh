#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the admin page test
# (tests/admin_page.rs): installs Debian's chromium and chromium-driver when
# missing and exports where they are. Sourced by scripts/test.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "prepare: installing chromium and chromium-driver" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
fi
export TOOLMESH_TEST_CHROMIUM=/usr/bin/chromium
export TOOLMESH_TEST_CHROMEDRIVER=/usr/bin/chromedriver
