package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// TestBucketVolumeCreate: POST /volumes with a bucket checks it against a
// real S3 server, keeps the credentials sealed, and never answers them.
func TestBucketVolumeCreate(t *testing.T) {
	s := s3test.StartT(t)
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	inner, err := volume.NewDirBacking(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(bytes.Repeat([]byte{3}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(ctx context.Context, id string) (*volume.Bucket, error) {
		v, err := db.GetVolume(ctx, id)
		if err != nil {
			return nil, volume.ErrNotFound
		}
		if v.Bucket == "" {
			return nil, nil
		}
		return volume.DecodeBucket(box, id, v.Bucket)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := volume.NewBuckets(t.TempDir(), inner, lookup, &volume.BucketDialer{AllowPrivate: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Volumes = b })
	dialer := &volume.BucketDialer{AllowPrivate: true}
	vols := &api.Volumes{Store: db, Backing: b, DefaultSizeMB: 20, MaxSizeMB: 64, Buckets: &api.BucketVolumes{Box: box, Dialer: dialer}}
	srv := httptest.NewServer(api.New(env.Manager, &fakeTemplates{}, api.Options{APIKey: testKey, Logger: log, Volumes: vols}))
	t.Cleanup(srv.Close)
	h := &harness{env: env, srv: srv}

	spec := func(over string) string {
		return `{"endpoint":"http://` + s.Endpoint + `","bucket":"` + s.Bucket + `","prefix":"team","accessKeyId":"` + s.AccessKey +
			`","secretAccessKey":"` + s.SecretKey + `"` + over + `}`
	}
	st, _, data := h.do(t, "POST", "/volumes", `{"name":"bkt","bucket":`+spec(`,"readOnly":true`)+`}`)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, data)
	}
	var got struct {
		VolumeID string         `json:"volumeID"`
		SizeMB   int64          `json:"sizeMB"`
		Bucket   map[string]any `json:"bucket"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.SizeMB != 0 || got.Bucket["bucket"] != s.Bucket || got.Bucket["prefix"] != "team/" || got.Bucket["readOnly"] != true ||
		got.Bucket["pathStyle"] != true || got.Bucket["secretAccessKey"] != nil || !strings.HasSuffix(got.Bucket["accessKeyId"].(string), s.AccessKey[len(s.AccessKey)-4:]) {
		t.Fatalf("create answered %s", data)
	}
	for _, path := range []string{"/volumes", "/volumes/" + got.VolumeID} {
		st, _, data := h.do(t, "GET", path, "")
		if st != http.StatusOK || !strings.Contains(string(data), `"bucket":{`) {
			t.Fatalf("GET %s = %d %s", path, st, data)
		}
		if strings.Contains(string(data), s.SecretKey) || strings.Contains(string(data), s.AccessKey) {
			t.Fatalf("GET %s shows a credential: %s", path, data)
		}
		if strings.Contains(string(data), `"usedBytes"`) {
			t.Fatalf("GET %s measures a bucket's use: %s", path, data)
		}
	}
	rec, err := db.GetVolume(context.Background(), got.VolumeID)
	if err != nil || rec.Bucket == "" || strings.Contains(rec.Bucket, s.SecretKey) || strings.Contains(rec.Bucket, s.AccessKey) {
		t.Fatalf("stored record %+v, %v: want the bucket with sealed credentials", rec, err)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"name":"b1","bucket":` + spec(``) + `,"sizeMB":100}`, "sizeMB does not apply"},
		{`{"name":"b2","bucket":` + strings.Replace(spec(``), s.SecretKey, "wrong-secret", 1) + `}`, "SignatureDoesNotMatch"},
		{`{"name":"b3","bucket":` + strings.Replace(spec(``), `"bucket":"`+s.Bucket, `"bucket":"no-such-bucket`, 1) + `}`, "NoSuchBucket"},
		{`{"name":"b4","bucket":` + strings.Replace(spec(``), "http://", "ftp://", 1) + `}`, "bucket.endpoint"},
		{`{"name":"bkt","bucket":` + spec(``) + `}`, "already exists"},
	} {
		st, _, data := h.do(t, "POST", "/volumes", tc.body)
		if st != http.StatusBadRequest || !strings.Contains(string(data), tc.want) {
			t.Errorf("POST %s = %d %s, want 400 with %q", tc.body, st, data, tc.want)
		}
	}
	// Without --volume-bucket-allow-private, the loopback server is refused.
	dialer.AllowPrivate = false
	st, _, data = h.do(t, "POST", "/volumes", `{"name":"b5","bucket":`+spec(``)+`}`)
	if st != http.StatusBadRequest || !strings.Contains(string(data), "--volume-bucket-allow-private") {
		t.Fatalf("loopback endpoint without the flag = %d %s", st, data)
	}
	// Without bucket support, a bucket create is a 400.
	vols.Buckets = nil
	st, _, data = h.do(t, "POST", "/volumes", `{"name":"b6","bucket":`+spec(``)+`}`)
	if st != http.StatusBadRequest || !strings.Contains(string(data), "not enabled") {
		t.Fatalf("bucket create without bucket support = %d %s", st, data)
	}
}
