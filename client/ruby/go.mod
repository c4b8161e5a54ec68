module ticketing.invalid/client-ruby

go 1.26
