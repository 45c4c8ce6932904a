package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func fetchShards(url, etag string) (*http.Response, shardsBody, error) {
	var b shardsBody
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, b, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, b, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&b)
	}
	return resp, b, err
}

func getShards(t *testing.T, url, etag string) (*http.Response, shardsBody) {
	t.Helper()
	resp, b, err := fetchShards(url, etag)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestShardsListsTheLedShardsWithTheirTokensByIndex(t *testing.T) {
	tab := newShardTable()
	tab.set(2, 5, true)
	tab.set(0, 1, true)
	tab.set(1, 3, true)
	tab.set(1, 0, false)
	srv := httptest.NewServer(serveShards(tab, "ns/s", "a", 3))
	defer srv.Close()
	resp, b := getShards(t, srv.URL, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == "" {
		t.Fatalf("status %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	if b.Set != "ns/s" || b.Identity != "a" || b.Shards != 3 || len(b.Owned) != 2 ||
		b.Owned[0] != (ownedShard{Index: 0, Lease: "ns/s-0", Token: 1}) || b.Owned[1] != (ownedShard{Index: 2, Lease: "ns/s-2", Token: 5}) {
		t.Errorf("body %+v", b)
	}
	if resp, _ := getShards(t, srv.URL, resp.Header.Get("ETag")); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the current ETag: %d, want 304", resp.StatusCode)
	}
}

func TestShardsLongPollAnswersOnTheNextChange(t *testing.T) {
	tab := newShardTable()
	tab.set(0, 1, true)
	srv := httptest.NewServer(serveShards(tab, "ns/s", "a", 2))
	defer srv.Close()
	resp, _ := getShards(t, srv.URL, "")
	etag := resp.Header.Get("ETag")
	type answer struct {
		resp *http.Response
		body shardsBody
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		r, b, err := fetchShards(srv.URL+"?wait=30s", etag)
		got <- answer{r, b, err}
	}()
	select {
	case a := <-got:
		t.Fatalf("answered before any change: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	tab.set(1, 4, true)
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.resp.StatusCode != http.StatusOK || len(a.body.Owned) != 2 || a.resp.Header.Get("ETag") == etag {
			t.Errorf("after the change: %d %+v ETag %q", a.resp.StatusCode, a.body, a.resp.Header.Get("ETag"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not answer the change")
	}
	// Nothing changes: 304 once the wait is over.
	resp, _ = getShards(t, srv.URL, "")
	if r, _ := getShards(t, srv.URL+"?wait=50ms", resp.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Errorf("no change within the wait: %d, want 304", r.StatusCode)
	}
}

func TestShardsRejectsABadWaitWithAJSONError(t *testing.T) {
	srv := httptest.NewServer(serveShards(newShardTable(), "ns/s", "a", 1))
	defer srv.Close()
	for _, q := range []string{"?wait=soon", "?wait=-1s", "?wait=6m"} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || body["error"] == "" || body["error"] == nil {
			t.Errorf("%s: %d %v, want 400 with an error", q, resp.StatusCode, body)
		}
	}
}

func TestParseShardsFlags(t *testing.T) {
	o, err := parse([]string{"--lease-name=s", "--shards=1000", "--kube-api-qps=-1"})
	if err != nil || o.shards != 1000 || o.kubeAPIQPS != -1 {
		t.Fatalf("%+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--lease-name=s", "--shards=-1"}, {"--lease-name=s", "--kube-api-burst=-1"}} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
