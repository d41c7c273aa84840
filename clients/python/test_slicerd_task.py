"""Tests of the slicerd_task library that need no sidecar; the end-to-end
test (e2e/sidecarapps_test.go) runs it against a real one."""

import unittest

import slicerd_task


class SliceKeyTest(unittest.TestCase):
    # docs/api.md, "From a key to a task": the test vectors every client
    # must reproduce.
    VECTORS = [
        (b"", 8620854627038688460),
        (b"a", 7577133169179506477),
        (b"user:42", 7930827119023188193),
        (b"hello world", 2510109842829423796),
        (b"slicerd", 2697739235159553904),
        (b"\x00\xff", 8101059617436044990),
    ]

    def test_vectors(self):
        for key, want in self.VECTORS:
            self.assertEqual(slicerd_task.slice_key(key), want, key)

    def test_str_is_utf8(self):
        self.assertEqual(slicerd_task.slice_key("user:42"), slicerd_task.slice_key(b"user:42"))

    def test_owns_from_ranges(self):
        t = slicerd_task.Task("/nonexistent")
        self.assertFalse(t.owns("a"))
        h = slicerd_task.slice_key("a")
        t._apply({"generation": "3", "owned": [{"start": "0", "end": str(h)}, {"start": str(h), "end": str(h + 1)}]})
        self.assertTrue(t.owns("a"))
        self.assertEqual(t.ranges()[0], 3)
        t._apply({"generation": "4", "owned": [{"start": "0", "end": str(h)}]})
        self.assertFalse(t.owns("a"))


if __name__ == "__main__":
    unittest.main()
