#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the admin page test
# (crates/system-tests/tests/admin_page.rs): installs Debian's chromium and chromium-driver when
# missing and exports where they are. Sourced by scripts/test.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    apt_install chromium chromium-driver || true
fi
export TOOLMESH_TEST_CHROMIUM=/usr/bin/chromium
export TOOLMESH_TEST_CHROMEDRIVER=/usr/bin/chromedriver
