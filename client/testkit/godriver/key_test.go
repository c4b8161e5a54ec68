package main

import (
	"encoding/json"
	"testing"
)

func TestJSONKeyKeepsLoneSurrogates(t *testing.T) {
	for in, want := range map[string]string{
		`"a\ud800b"`:        "a\xed\xa0\x80b",
		`"\udc00"`:          "\xed\xb0\x80",
		`"\ud83d\ude00 \n"`: "\U0001F600 \n",
		`"plain/ключ"`:      "plain/ключ",
		`"q\"\\"`:           "q\"\\",
	} {
		var k jsonKey
		if err := json.Unmarshal([]byte(in), &k); err != nil || string(k) != want {
			t.Errorf("%s: %q %v, want %q", in, string(k), err, want)
		}
	}
}
